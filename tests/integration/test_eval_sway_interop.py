"""learnerd's null calibration, z-scores and retention probes against the released dlm-sway 0.1.0, on one
tiny base and adapter.

Both load the same saved LoRA adapter (noise in its B matrices, so it moves the distributions) on the
built-in tiny model (:mod:`tests.support.sway_peer`): sway through its own HF backend and probes, learnerd
through its differential backend. With ``calibration = "sway"`` (the default) learnerd's null statistics —
and so its z-scores — are sway's; with ``"document"`` they are not. ``calibration_drift`` (on sway's own
item pack, read from the installed distribution) gives sway's values and verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_eval import make_adapter
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import calibration_drift, paraphrase
from learnerd.eval.probes.base import EvalOptions, ProbeContext, z_score
from learnerd.eval.probes.null_adapter import run as calibrate
from learnerd.store.dlm import parse_text
from tests.support.sway_peer import learnerd_backend, sway_backend

sway = pytest.importorskip(
    "dlm_sway.backends.hf", reason="dlm-sway 0.1.0 is not installed (pip install dlm-sway==0.1.0, a test extra)"
)
pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOP_K = 1024
"""Above the tiny vocabulary (262): whole distributions, no tail. (With a tail the two differ by design:
sway spreads it over the union of both top-k, learnerd over the whole vocabulary; see ml/divergence.py.)"""
DOC = (
    "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
    "::instruction::\n### Q !probe\nWhat is the capital of France?\n\n### A\nParis\n"
)
TAIL_TOP_K = 16
"""A top-k that leaves a tail on the tiny vocabulary: where sway's tail treatment and learnerd's differ."""
NOISY_NULL = 0.3
"""A null-adapter scale at which noise adapters regress some of the pack's first 10 items on the tiny model
(at sway's 0.02 none does: a degenerate null, no z-score), so the z-score path of calibration_drift is compared."""
NATS_ATOL = 1e-4
"""Absolute agreement (nats) of log-likelihood differences computed from float32 logits by two code paths
(sway: one unpadded forward pass per text, float32 log-softmax; learnerd: padded batches, float64
log-softmax): sums of up to ≈ 40 nats, float32's eps 1.2e-7, a wide margin over what is seen (≈ 1e-5)."""


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapter"), scale=0.5)


def sway_null_stats(
    tiny_model_dir: Path, adapter_dir: Path, kind: str = "delta_kl", top_k: int = TOP_K, **spec: float
) -> dict:
    from dlm_sway.probes.base import RunContext
    from dlm_sway.probes.null_adapter import NullAdapterProbe, NullAdapterSpec

    backend = sway_backend(tiny_model_dir, adapter_dir)
    spec_ = NullAdapterSpec(name="null", kind="null_adapter", calibrate_kinds=[kind], cache=False, **spec)
    result = NullAdapterProbe().run(spec_, RunContext(backend=backend, top_k=top_k))
    assert result.verdict.value == "pass", result.message
    return dict(result.evidence["null_stats"][kind])


def learnerd_context(tiny_model_dir: Path, adapter_dir: Path, **options: object) -> ProbeContext:
    backend = learnerd_backend(tiny_model_dir, adapter_dir)
    inputs = document_inputs(parse_text(DOC), backend.tokenizer)
    return ProbeContext(backend, inputs, EvalOptions(top_k=TOP_K, **options))


def learnerd_null_stats(
    tiny_model_dir: Path, adapter_dir: Path, calibration: str, top_k: int = TOP_K
) -> dict[str, float]:
    backend = learnerd_backend(tiny_model_dir, adapter_dir)
    inputs = document_inputs(parse_text(DOC), backend.tokenizer)
    ctx = ProbeContext(backend, inputs, EvalOptions(top_k=top_k, calibration=calibration))
    calibrate(ctx)
    return ctx.null_stats["delta_kl"]


def test_sway_calibration_gives_sways_null_stats_and_z_scores(tiny_model_dir, adapter_dir):
    theirs = sway_null_stats(tiny_model_dir, adapter_dir)
    ours = learnerd_null_stats(tiny_model_dir, adapter_dir, "sway")
    # sway keeps log-probabilities in float32, learnerd in float64: agreement to float32's precision
    assert ours["mean"] == pytest.approx(theirs["mean"], rel=1e-4)
    assert ours["std"] == pytest.approx(theirs["std"], rel=1e-3)
    assert ours["n"] == theirs["n"] == 3 and ours["degenerate"] == theirs["degenerate"] == 0.0
    raw = theirs["mean"] + 5 * theirs["std"]  # any raw value: the same z on both sides
    ctx = ProbeContext(None, None, null_stats={"delta_kl": ours})  # type: ignore[arg-type]
    assert z_score(ctx, "delta_kl", raw) == pytest.approx(5.0, rel=1e-3)


def test_sway_exact_calibration_gives_sways_null_stats_when_the_top_k_leaves_a_tail(tiny_model_dir, adapter_dir):
    theirs = sway_null_stats(tiny_model_dir, adapter_dir, top_k=TAIL_TOP_K)
    exact = learnerd_null_stats(tiny_model_dir, adapter_dir, "sway-exact", top_k=TAIL_TOP_K)
    ours = learnerd_null_stats(tiny_model_dir, adapter_dir, "sway", top_k=TAIL_TOP_K)
    assert exact["mean"] == pytest.approx(theirs["mean"], rel=1e-4)
    assert exact["std"] == pytest.approx(theirs["std"], rel=1e-3)
    # the default completes the tail over the whole vocabulary: a different number, by design
    assert ours["mean"] != pytest.approx(theirs["mean"], rel=1e-3)


def test_document_calibration_is_not_sways(tiny_model_dir, adapter_dir):
    theirs = sway_null_stats(tiny_model_dir, adapter_dir)
    ours = learnerd_null_stats(tiny_model_dir, adapter_dir, "document")
    assert ours["mean"] != pytest.approx(theirs["mean"], rel=1e-2)


def test_calibration_drift_gives_sways_values_and_verdict(tiny_model_dir, adapter_dir):
    from dlm_sway.probes._calibration_pack import BUILT_IN_PACK
    from dlm_sway.probes.base import RunContext
    from dlm_sway.probes.calibration_drift import CalibrationDriftProbe, CalibrationDriftSpec

    theirs_null = sway_null_stats(tiny_model_dir, adapter_dir, "calibration_drift", init_scale=NOISY_NULL)
    backend = sway_backend(tiny_model_dir, adapter_dir)
    context = RunContext(backend=backend, top_k=TOP_K, null_stats={"calibration_drift": theirs_null})
    theirs = CalibrationDriftProbe().run(CalibrationDriftSpec(name="calibration_drift"), context)
    ctx = learnerd_context(tiny_model_dir, adapter_dir, null_init_scale=NOISY_NULL)
    calibrate(ctx)
    ours = calibration_drift.run(ctx)

    assert calibration_drift.sway_pack().items == BUILT_IN_PACK  # read from the distribution, not retyped
    null = ctx.null_stats["calibration_drift"]
    assert null["degenerate"] == theirs_null["degenerate"] == 0.0 and null["n"] == theirs_null["n"] == 3
    assert null["mean"] == pytest.approx(theirs_null["mean"], rel=1e-9)  # fractions of 10 items: exact
    assert null["std"] == pytest.approx(theirs_null["std"], rel=1e-9)
    assert 0.1 < ours.raw < 0.9 and ours.raw == theirs.raw  # a fraction of 200 items: equal, not close
    assert ours.verdict.value == theirs.verdict.value == "fail"
    assert ours.evidence["regressed_count"] == theirs.evidence["regressed_count"]
    assert ours.z_score == pytest.approx(theirs.z_score, rel=1e-9) and ours.score == pytest.approx(theirs.score)
    assert ours.evidence["mean_delta_nats"] == pytest.approx(theirs.evidence["mean_delta_nats"], rel=1e-5)
    mine, sways = ours.evidence["worst_offenders"], theirs.evidence["worst_offenders"]
    assert [(w["prompt"], w["gold"]) for w in mine] == [(w["prompt"], w["gold"]) for w in sways] and len(mine) == 5
    assert [w["delta"] for w in mine] == pytest.approx([w["delta"] for w in sways], abs=NATS_ATOL)

    # every item's delta, sway's as its probe computes it (per estimated token, one forward pass per text)
    per_item = calibration_drift.deltas(ctx, ctx.backend.as_finetuned, BUILT_IN_PACK)
    for (prompt, gold), delta in zip(BUILT_IN_PACK, per_item, strict=True):
        tokens = max(1, len(gold) // 4)
        with backend.as_base() as b:
            base = b.logprob_of(prompt, gold) / tokens
        with backend.as_finetuned() as f:
            ft = f.logprob_of(prompt, gold) / tokens
        assert delta == pytest.approx(ft - base, abs=NATS_ATOL), prompt


def test_paraphrase_invariance_calibrates_and_lifts_as_sway(tiny_model_dir, adapter_dir):
    from dlm_sway.probes.base import RunContext
    from dlm_sway.probes.paraphrase_invariance import ParaphraseInvarianceProbe

    theirs_null = sway_null_stats(tiny_model_dir, adapter_dir, "paraphrase_invariance")
    ctx = learnerd_context(tiny_model_dir, adapter_dir)
    calibrate(ctx)
    ours_null = ctx.null_stats["paraphrase_invariance"]
    assert ours_null["mean"] == pytest.approx(theirs_null["mean"], rel=1e-4, abs=NATS_ATOL)
    assert ours_null["std"] == pytest.approx(theirs_null["std"], rel=1e-4)
    assert ours_null["degenerate"] == theirs_null["degenerate"] == 0.0

    # sway's own probe on its sentinel cases against learnerd's lifts of the same cases
    spec = ParaphraseInvarianceProbe.calibrate_spec(None)  # type: ignore[arg-type]
    theirs = ParaphraseInvarianceProbe().run(spec, RunContext(backend=sway_backend(tiny_model_dir, adapter_dir)))
    ours = paraphrase.lifts(ctx, ctx.backend.as_finetuned, paraphrase.sentinel_cases(ctx))
    expected = [(c["verbatim_lift"], c["paraphrase_lift"]) for c in theirs.evidence["per_case"]]
    assert [v for pair in ours for v in pair] == pytest.approx([v for pair in expected for v in pair], abs=NATS_ATOL)
