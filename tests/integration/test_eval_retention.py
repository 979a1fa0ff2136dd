"""The retention probes on the built-in tiny model with real LoRA adapters: ``answer_retention`` (the base's own
right answers kept), ``paraphrase_invariance`` (the document's pairs, paraphrased as sway does),
``calibration_drift`` without dlm-sway; and all three through a whole evaluation, its summary, score and JUnit.

Adapters (:func:`benchmarks.bench_eval.make_adapter`): ``still`` has zero B matrices (it changes
nothing: the fine-tuned view is the base), ``noisy`` seeded noise in them (it changes every distribution),
``faint`` the same noise at 1/25 of the scale, ``fainter`` at 1/100 (it keeps some of the base's answers).
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from rich.console import Console

from benchmarks.bench_eval import make_adapter
from learnerd.eval.inputs import document_inputs
from learnerd.eval.junit import to_junit
from learnerd.eval.probes import calibration_drift, paraphrase, retention
from learnerd.eval.probes.base import EvalOptions, ProbeContext
from learnerd.eval.probes.null_adapter import run as calibrate
from learnerd.eval.report import Verdict
from learnerd.eval.settings import EvaluationSettings, GateSettings
from learnerd.eval.suite import evaluate
from learnerd.eval.summary import render_report
from learnerd.store.dlm import parse_text
from tests.support.sway_peer import learnerd_backend

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FRONT = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
PAIRS = [(f"Which colour is flag {i}?", f"Colour {i}") for i in range(4)]
DOC = (
    FRONT
    + "# Flags\nEach flag has one colour.\n\n"
    + "::instruction::\n### Q !probe\n{}\n\n### A\n{}\n\n### Q\n{}\n\n### A\n{}\n\n".format(*PAIRS[0], *PAIRS[1])
    + "::instruction::\n### Q !probe\n{}\n\n### A\n{}\n\n### Q !probe\n{}\n\n### A\n{}\n".format(*PAIRS[2], *PAIRS[3])
)
NEW_KINDS = ("paraphrase_invariance", "calibration_drift", "answer_retention")


@pytest.fixture(scope="module")
def still(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("still"), scale=0.0)


@pytest.fixture(scope="module")
def noisy(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("noisy"), scale=0.5)


@pytest.fixture(scope="module")
def faint(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("faint"), scale=0.02)


@pytest.fixture(scope="module")
def fainter(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("fainter"), scale=0.005)


def context(base_dir: Path, adapter_dir: Path, text: str = DOC, **options: object) -> ProbeContext:
    backend = learnerd_backend(base_dir, adapter_dir)
    return ProbeContext(backend, document_inputs(parse_text(text), backend.tokenizer), EvalOptions(**options))


def own_answers(ctx: ProbeContext, n: int = 24) -> list[retention.PoolItem]:
    """Pool items whose gold is a word of the base's own greedy answer to the first ``n`` questions of the
    general pool, so the random tiny base answers every one of them right."""
    questions = retention.general_pool()[:n]
    encoder = ctx.inputs.encoder
    with ctx.backend.as_base() as base:
        answers = base.generate_many([encoder.prompt(q.prompt) for q in questions], [32] * n)
    pool = []
    for question, ids in zip(questions, answers, strict=True):
        words = re.findall(r"\w{2,}", encoder.decode(ids))
        if words:
            pool.append(retention.PoolItem(question.category, question.prompt, words[0]))
    assert len(pool) >= n // 2
    return pool


def test_retention_skips_a_base_that_answers_nothing_right(tiny_model_dir, still):
    result = retention.run(context(tiny_model_dir, still))
    assert result.verdict == Verdict.SKIP
    assert (
        result.message == f"the base model answers none of the {len(retention.general_pool())} general questions right"
    )


def test_the_evaluation_settings_size_the_pool_and_the_answers(tiny_model_dir, still):
    """``[evaluation] retention_pool_size`` and ``retention_max_new_tokens``, read from a config section, reach the
    probe: it asks the sample and reports its size and budget."""
    settings = EvaluationSettings.model_validate({"retention_pool_size": 12, "retention_max_new_tokens": 8})
    ctx = context(tiny_model_dir, still)
    configured = ProbeContext(ctx.backend, ctx.inputs, EvalOptions.from_settings(settings))
    result = retention.run(configured)
    assert result.message == "the base model answers none of the 12 general questions right"
    own = own_answers(ctx, 12)
    answered = retention.judge(configured, own)
    assert answered.evidence["max_new_tokens"] == 8 and answered.evidence["pool_size"] == len(own)


def test_an_adapter_that_changes_nothing_keeps_every_answer(tiny_model_dir, still):
    ctx = context(tiny_model_dir, still)
    pool = own_answers(ctx)
    result = retention.judge(ctx, pool)
    evidence = result.evidence
    assert result.verdict == Verdict.PASS and result.raw == result.score == 1.0
    assert evidence["base_right"] == evidence["kept"] == len(pool) and evidence["lost"] == []
    assert evidence["mean_js_nats"] == pytest.approx(0.0, abs=1e-12)  # the same logits in both views
    assert sum(c["base_right"] for c in evidence["by_category"].values()) == len(pool)


def test_an_adapter_that_changes_the_answers_fails_and_names_what_it_lost(tiny_model_dir, noisy, fainter):
    ctx = context(tiny_model_dir, noisy)
    pool = own_answers(ctx)
    result = retention.judge(ctx, pool)
    evidence = result.evidence
    assert result.verdict == Verdict.FAIL and result.raw == evidence["kept"] / evidence["base_right"] < 0.95
    assert evidence["base_right"] == len(pool) and 0.01 < evidence["mean_js_nats"] <= 0.6932
    lost = evidence["lost"][0]
    assert retention.contains(lost["base_answer"], lost["gold"]) and not retention.contains(
        lost["answer"], lost["gold"]
    )
    assert evidence["allowed_lost"] == 0 and evidence["rule"].startswith(f"at most 0 of {len(pool)} may be lost")
    # the verdict is the gate's rule: a floor of 0 fails only an adapter that loses every right answer
    strict = retention.judge(context(tiny_model_dir, fainter), pool)
    relaxed = retention.judge(context(tiny_model_dir, fainter, gate=GateSettings(retention_floor_keep=0.0)), pool)
    assert 0 < strict.evidence["kept"] < len(pool) and strict.verdict == Verdict.FAIL
    assert relaxed.verdict == Verdict.PASS and relaxed.raw == strict.raw
    assert relaxed.evidence["allowed_lost"] == len(pool) - 1


def test_each_lost_answer_is_led_along_the_bases_answer_to_tell_wording_from_knowledge(tiny_model_dir, faint):
    """A lost item *knows* when the adapter, continuing the base's own answer from just before the gold
    (:func:`retention.gold_span`) for the gold's tokens and two more, still says it. Recomputed here through
    the backend's views in the probe's batches (greedy paths on the random tiny model part at near-ties that
    another batching would break differently); the faint adapter loses answers of both kinds."""
    ctx = context(tiny_model_dir, faint)
    pool = own_answers(ctx)  # every item right for the base: the adapter answers all with the full budget
    evidence = retention.judge(ctx, pool).evidence
    encoder = ctx.inputs.encoder
    prompts = [encoder.prompt(item.prompt) for item in pool]
    with ctx.backend.as_base() as base:
        base_ids = base.generate_many(prompts, [32] * len(pool))
    with ctx.backend.as_finetuned() as ft:
        ft_ids = ft.generate_many(prompts, [32] * len(pool))
        lost = [i for i, ids in enumerate(ft_ids) if not retention.contains(encoder.decode(ids), pool[i].gold)]
        spans = [retention.gold_span(encoder.decode, base_ids[i], pool[i].gold) for i in lost]
        led = ft.generate_many(
            [[*prompts[i], *base_ids[i][:start]] for i, (start, _) in zip(lost, spans, strict=True)],
            [end - start + 2 for start, end in spans],
        )
    knows = {
        pool[i].prompt: retention.contains(encoder.decode(ids), pool[i].gold) for i, ids in zip(lost, led, strict=True)
    }
    wording = sum(knows.values())
    assert evidence["base_right"] - evidence["kept"] == len(lost)
    assert (evidence["lost_wording"], evidence["lost_knowledge"]) == (wording, len(lost) - wording)
    assert 0 < wording < len(lost)
    shown = evidence["lost"]
    assert [e["knows"] for e in shown] == sorted(e["knows"] for e in shown)  # what it no longer knows first
    assert all(e["knows"] == knows[e["prompt"]] == retention.contains(e["led"], e["gold"]) for e in shown)


def test_paraphrase_cases_are_the_documents_pairs_paraphrased_as_sways_bridge(tiny_model_dir, noisy):
    autogen = pytest.importorskip("dlm_sway.integrations.dlm.autogen", reason="dlm-sway 0.1.0 is a test extra")
    assert paraphrase.paraphrased(PAIRS[0][0]) == tuple(autogen._auto_paraphrases(PAIRS[0][0]))
    ctx = context(tiny_model_dir, noisy, paraphrase_cases=3)
    calibrate(ctx)
    result = paraphrase.run(ctx)
    evidence = result.evidence
    assert [c["prompt"] for c in evidence["per_case"]] == [q for q, _ in PAIRS[:3]]  # a plain ### Q counts too
    assert evidence["generalization_ratio"] == pytest.approx(
        evidence["paraphrase_lift_mean"] / evidence["verbatim_lift_mean"]
    )
    assert result.raw == evidence["verbatim_lift_mean"] and result.z_score is not None
    assert result.verdict == (Verdict.PASS if result.z_score >= 3.0 else Verdict.FAIL)


def test_paraphrase_invariance_skips_a_document_without_pairs(tiny_model_dir, still):
    result = paraphrase.run(context(tiny_model_dir, still, FRONT + "Only prose here.\n"))
    assert (
        result.verdict == Verdict.SKIP
        and result.message == "the document has no ::instruction:: Q/A pair to paraphrase"
    )


def test_calibration_drift_without_dlm_sway_is_skipped(monkeypatch):
    def missing(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    calibration_drift.sway_pack.cache_clear()
    monkeypatch.setattr(calibration_drift.metadata, "distribution", missing)
    try:
        result = calibration_drift.run(ProbeContext(None, None))  # type: ignore[arg-type]
    finally:
        calibration_drift.sway_pack.cache_clear()
    assert (
        result.verdict == Verdict.SKIP and "dlm-sway is not installed (pip install dlm-sway==0.1.0)" in result.message
    )


def test_the_retention_probes_are_in_the_report_its_score_summary_and_junit(tiny_model_dir, noisy):
    ctx = context(tiny_model_dir, noisy)
    report = evaluate(ctx.backend, parse_text(DOC), base_model_id="tiny", adapter_id="noisy")
    by_kind = {p.kind: p for p in report.probes}
    assert by_kind["answer_retention"].verdict == Verdict.SKIP  # the random base answers nothing right
    assert by_kind["paraphrase_invariance"].verdict in (Verdict.PASS, Verdict.FAIL)
    drift = by_kind["calibration_drift"]
    assert drift.verdict == Verdict.FAIL and drift.evidence["total_items"] == 200  # noise forgets the pack
    assert set(report.null_stats) == {
        "delta_kl",
        "section_internalization",
        "paraphrase_invariance",
        "calibration_drift",
    }
    assert report.score.components["calibration"] == pytest.approx(drift.score)
    assert report.score.components["attribution"] > 0 and "calibration" in report.score.weights

    console = Console(record=True, width=240)
    render_report(report, console)
    table = console.export_text()
    assert all(kind in table for kind in NEW_KINDS) and f"calibration {drift.score:.2f}" in table

    cases = {case.get("classname"): case for case in ET.fromstring(to_junit(report)).iter("testcase")}
    assert cases["answer_retention"].find("skipped") is not None
    assert cases["calibration_drift"].find("failure").get("message") == drift.message
