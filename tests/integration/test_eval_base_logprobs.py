"""The base's log-likelihoods kept in the model cache item by item (:mod:`learnerd.eval.base_logprobs`), on the
built-in tiny model with a real LoRA adapter: read back by a later backend without a forward pass and equal to
what it computes; a later call computes only the items it has not seen; the fine-tuned view is never kept; a
damaged database is removed and built again; a model cache that cannot be written is skipped. A second
``calibration_drift`` and ``section_internalization`` on the same base run only the adapter's side and report
the same. The base's next-token distributions are kept the same way: a second ``delta_kl`` and
``multi_turn_coherence_decay`` run no base forward pass."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_eval import make_adapter
from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.base_logprobs import BaseLogprobStore, item_key
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import calibration_drift, coherence, delta_kl, internalization
from learnerd.eval.probes.base import EvalOptions, ProbeContext
from learnerd.eval.report import ProbeResult
from learnerd.store.dlm import parse_text
from tests.support.sway_peer import learnerd_backend

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DOC = (
    "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
    "::instruction::\n### Q\nList the pods.\n\n### A\nkubectl get pods\n"
    "::instruction::\n### Q\nShow the disk usage.\n\n### A\ndf -h\n"
    "::instruction::\n### Q\nWhich branch am I on?\n\n### A\ngit branch --show-current\n"
)
TEXTS = ["The capital of France is", "Two plus two is", "Romeo and Juliet was written by", "Water boils at"]


@pytest.fixture(scope="module")
def noisy(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("noisy"), scale=0.5)


def backend(tiny_model_dir: Path, adapter: Path, cache: Path) -> DifferentialBackend:
    loaded = learnerd_backend(tiny_model_dir, adapter)
    loaded.logprob_store = BaseLogprobStore(cache, "tiny@test", loaded.placement())
    return loaded


def items(b: DifferentialBackend, texts: list[str] = TEXTS) -> list[tuple[list[int], list[int]]]:
    encoder = document_inputs(parse_text(DOC), b.tokenizer).encoder
    scored = [encoder.completion(text, f" {n} and more") for n, text in enumerate(texts)]
    return [(s.context, s.target) for s in scored]


def rows(store: BaseLogprobStore) -> int:
    with sqlite3.connect(store.path) as conn:
        return conn.execute("SELECT count(*) FROM logprobs").fetchone()[0]


def test_the_base_logprobs_are_kept_item_by_item_and_read_back_without_a_forward_pass(tiny_model_dir, noisy, tmp_path):
    first = backend(tiny_model_dir, noisy, tmp_path)
    with first.as_finetuned() as ft:
        ft.logprobs(items(first))
    assert list(tmp_path.iterdir()) == []  # the fine-tuned side is never kept
    with first.as_base() as base:
        stored = base.logprobs(items(first))
    assert first.logprob_store is not None and rows(first.logprob_store) == len(TEXTS)

    second = backend(tiny_model_dir, noisy, tmp_path)
    with second.as_base() as base:
        read = base.logprobs(items(second))
        assert second.forward_passes == 0  # read from the store
    assert read == stored and all(v < 0 for v in read)
    fresh = learnerd_backend(tiny_model_dir, noisy)  # no store: computed
    with fresh.as_base() as base:
        assert base.logprobs(items(fresh)) == pytest.approx(read, rel=1e-6)  # float32 logits, float64 sums


def test_a_later_call_computes_only_the_items_it_has_not_seen(tiny_model_dir, noisy, tmp_path):
    first = backend(tiny_model_dir, noisy, tmp_path)
    with first.as_base() as base:
        base.logprobs(items(first, TEXTS[:2]))
    store = first.logprob_store
    assert store is not None
    with sqlite3.connect(store.path) as conn:  # mark the two kept values: read back, they cannot be computed
        conn.execute("UPDATE logprobs SET nats = -123.0")
    second = backend(tiny_model_dir, noisy, tmp_path)
    with second.as_base() as base:
        both = base.logprobs(items(second))
    alone = learnerd_backend(tiny_model_dir, noisy)
    with alone.as_base() as base:
        computed = base.logprobs(items(alone))
    assert both[:2] == [-123.0, -123.0]
    assert both[2:] == pytest.approx(computed[2:], rel=1e-6) and rows(store) == len(TEXTS)


def test_another_base_identity_or_placement_is_another_database_and_an_item_is_its_ids(tiny_model_dir, tmp_path):
    a = BaseLogprobStore(tmp_path, "tiny@test", ("cpu", "torch.float32"))
    assert a.path != BaseLogprobStore(tmp_path, "tiny@other", ("cpu", "torch.float32")).path
    assert a.path != BaseLogprobStore(tmp_path, "tiny@test", ("cpu", "torch.bfloat16")).path
    assert item_key(([1, 2], [3])) == item_key((np.array([1, 2]), np.array([3], dtype=np.int32)))
    assert item_key(([1, 2], [3])) != item_key(([1], [2, 3]))
    a.save({b"k" * 32: -1.5})
    assert a.load([b"k" * 32, b"x" * 32]) == {b"k" * 32: -1.5}


def test_a_damaged_database_is_removed_and_built_again(tiny_model_dir, noisy, tmp_path):
    b = backend(tiny_model_dir, noisy, tmp_path)
    store = b.logprob_store
    assert store is not None
    store.path.write_bytes(b"not a database, " * 64)
    with b.as_base() as base:
        values = base.logprobs(items(b))
    assert len(values) == len(TEXTS) and rows(store) == len(TEXTS)


def test_a_model_cache_that_cannot_be_written_is_skipped_and_the_values_still_come(tiny_model_dir, noisy, tmp_path):
    blocked = tmp_path / "models"
    blocked.write_text("a file where the model cache should be")  # mkdir fails, as root too
    b = backend(tiny_model_dir, noisy, blocked)
    with b.as_base() as base:
        values = base.logprobs(items(b))
    alone = learnerd_backend(tiny_model_dir, noisy)
    with alone.as_base() as base:
        assert values == pytest.approx(base.logprobs(items(alone)), rel=1e-6)
    assert blocked.is_file()


@pytest.mark.parametrize("probe", [calibration_drift, internalization], ids=lambda m: m.KIND)
def test_a_second_evaluation_of_a_probe_runs_only_the_adapters_side(tiny_model_dir, noisy, tmp_path, probe):
    if probe is calibration_drift:
        pytest.importorskip("dlm_sway", reason="calibration_drift's pack is dlm-sway 0.1.0's (not installed)")

    def judged() -> tuple[ProbeResult, int]:
        b = backend(tiny_model_dir, noisy, tmp_path)
        ctx = ProbeContext(b, document_inputs(parse_text(DOC), b.tokenizer), EvalOptions(drift_items_limit=12))
        return probe.run(ctx), b.forward_passes

    first, first_passes = judged()
    second, second_passes = judged()
    assert first.verdict == second.verdict and first.raw is not None
    assert second.raw == pytest.approx(first.raw, rel=1e-6, abs=1e-9)
    assert 0 < second_passes < first_passes


def test_the_base_next_token_dists_are_kept_and_read_back_without_a_forward_pass(tiny_model_dir, noisy, tmp_path):
    first = backend(tiny_model_dir, noisy, tmp_path)
    prompts = [context for context, _ in items(first)]
    with first.as_base() as base:
        stored = base.next_token_dists(prompts, 16)
    second = backend(tiny_model_dir, noisy, tmp_path)
    with second.as_base() as base:
        read = base.next_token_dists(prompts, 16)
        assert second.forward_passes == 0
        other_k = base.next_token_dists(prompts, 8)  # another top_k is another item
    assert second.forward_passes > 0 and len(other_k[0].token_ids) == 8
    for got, kept in zip(read, stored, strict=True):
        assert np.array_equal(got.token_ids, kept.token_ids) and got.token_ids.dtype == np.int64
        assert got.logprobs.tolist() == kept.logprobs.tolist() and got.vocab_size == kept.vocab_size
    with second.as_finetuned() as ft:  # the fine-tuned view is never kept
        ft.next_token_dists([[*p, 5] for p in prompts], 16)
    with sqlite3.connect(second.logprob_store.path) as conn:
        assert conn.execute("SELECT count(*) FROM dists").fetchone()[0] == 2 * len(prompts)


@pytest.mark.parametrize("probe", [delta_kl, coherence], ids=lambda m: m.KIND)
def test_a_second_evaluation_runs_none_of_the_base_sides_next_token_passes(tiny_model_dir, noisy, tmp_path, probe):
    """``multi_turn_coherence_decay``'s base side is one batch a later turn (its 4 dialogues' histories, the
    adapter's answers in them the same again), ``delta_kl``'s one batch of the document's prompts."""

    def judged(cache: Path | None) -> tuple[ProbeResult, int]:
        b = backend(tiny_model_dir, noisy, cache) if cache is not None else learnerd_backend(tiny_model_dir, noisy)
        ctx = ProbeContext(b, document_inputs(parse_text(DOC), b.tokenizer), EvalOptions(null_runs=0))
        return probe.run(ctx), b.forward_passes

    first, first_passes = judged(tmp_path)
    second, second_passes = judged(tmp_path)
    uncached, uncached_passes = judged(None)
    base_batches = EvalOptions().max_turns - 1 if probe is coherence else 1
    assert first_passes == uncached_passes and second_passes == first_passes - base_batches
    measured = [r.evidence["per_turn_kls"] if probe is coherence else [r.raw] for r in (first, second, uncached)]
    assert first.verdict == second.verdict == uncached.verdict and all(measured[0])
    assert measured[1] == pytest.approx(measured[0], rel=1e-6) and measured[2] == pytest.approx(measured[0], rel=1e-6)
