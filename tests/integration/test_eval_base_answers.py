"""The base's answers kept in the model cache (:mod:`learnerd.eval.base_answers`), on the built-in tiny model
with a real LoRA adapter: stored once, read back by a later backend without a forward pass and equal to what
it would generate; keyed by budgets and ``top_k``; never stored for the fine-tuned view; an unreadable file is
generated again; a store that cannot be written is skipped. ``answer_retention`` on a second backend runs only
the adapter's side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_eval import make_adapter
from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.base_answers import BaseAnswerStore
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import retention
from learnerd.eval.probes.base import EvalOptions, ProbeContext
from learnerd.eval.report import ProbeResult
from learnerd.store.dlm import parse_text
from tests.support.sway_peer import learnerd_backend

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DOC = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n# Notes\nNothing.\n"
QUESTIONS = [item.prompt for item in retention.general_pool()[:6]]


@pytest.fixture(scope="module")
def noisy(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_model_dir, tmp_path_factory.mktemp("noisy"), scale=0.5)


def backend(tiny_model_dir: Path, adapter: Path, cache: Path) -> DifferentialBackend:
    loaded = learnerd_backend(tiny_model_dir, adapter)
    loaded.answer_store = BaseAnswerStore(cache, "tiny@test")
    return loaded


def prompts(b: DifferentialBackend) -> list[list[int]]:
    encoder = document_inputs(parse_text(DOC), b.tokenizer).encoder
    return [encoder.prompt(q) for q in QUESTIONS]


def test_the_base_answers_are_stored_once_and_read_back_without_a_forward_pass(tiny_model_dir, noisy, tmp_path):
    first = backend(tiny_model_dir, noisy, tmp_path)
    budgets = [8, 12, 8, 12, 8, 12]
    with first.as_base() as base:
        stored_ids, stored_dists = base.answers(prompts(first), budgets, 16, persist=True)
    assert first.forward_passes > 0 and len(list(tmp_path.glob("base-answers-*.npz"))) == 1

    second = backend(tiny_model_dir, noisy, tmp_path)
    with second.as_base() as base:
        ids, dists = base.answers(prompts(second), budgets, 16, persist=True)
        assert second.forward_passes == 0  # read from the store
        fresh_ids, fresh_dists = base.answers(prompts(second), budgets, 16)
    assert second.forward_passes > 0
    assert ids == stored_ids == fresh_ids and any(ids)
    for got, fresh in zip(dists, fresh_dists, strict=True):
        assert np.array_equal(got.token_ids, fresh.token_ids) and got.vocab_size == fresh.vocab_size
        np.testing.assert_allclose(got.logprobs, fresh.logprobs, rtol=0, atol=1e-5)  # float32 logits
        assert got.token_ids.dtype == np.int64 and got.logprobs.dtype == np.float64
    assert [d.logprobs.tolist() for d in dists] == [d.logprobs.tolist() for d in stored_dists]


def test_other_budgets_or_top_k_are_other_entries_and_the_fine_tuned_view_is_never_stored(
    tiny_model_dir, noisy, tmp_path
):
    b = backend(tiny_model_dir, noisy, tmp_path)
    with b.as_finetuned() as ft:
        ft.answers(prompts(b), [4] * len(QUESTIONS), 16, persist=True)
    assert list(tmp_path.iterdir()) == []
    with b.as_base() as base:
        for budget, top_k in [(4, 16), (5, 16), (4, 8)]:
            base.answers(prompts(b), [budget] * len(QUESTIONS), top_k, persist=True)
    assert len(list(tmp_path.glob("base-answers-*.npz"))) == 3


def test_an_unreadable_entry_is_generated_again_and_replaced(tiny_model_dir, noisy, tmp_path):
    b = backend(tiny_model_dir, noisy, tmp_path)
    store, budgets = b.answer_store, [4] * len(QUESTIONS)
    assert store is not None
    digest = store.key((str(b.model.device), str(b.model.dtype)), prompts(b), budgets, 16)
    store.directory.mkdir(exist_ok=True)
    store.path(digest).write_bytes(b"not an npz file")
    with b.as_base() as base:
        ids, dists = base.answers(prompts(b), budgets, 16, persist=True)
    assert b.forward_passes > 0
    reread = store.load(digest)
    assert reread is not None and reread[0] == ids

    store.save(digest, (ids[:-1], dists))  # one answer short of its distributions: inconsistent
    assert store.load(digest) is None


def test_a_second_answer_retention_runs_only_the_adapters_side(tiny_model_dir, noisy, tmp_path):
    def judged() -> tuple[ProbeResult, int]:
        b = backend(tiny_model_dir, noisy, tmp_path)
        encoder = document_inputs(parse_text(DOC), b.tokenizer).encoder
        with b.as_base() as base:  # gold: a word of the base's own answer, so the tiny base answers all right
            own = base.generate_many([encoder.prompt(q) for q in QUESTIONS], [16] * len(QUESTIONS))
        pool = [
            retention.PoolItem("knowledge", q, encoder.decode(ids).split()[0])
            for q, ids in zip(QUESTIONS, own, strict=True)
            if encoder.decode(ids).split()
        ]
        before = b.forward_passes
        ctx = ProbeContext(b, document_inputs(parse_text(DOC), b.tokenizer), EvalOptions(retention_max_new_tokens=16))
        return retention.judge(ctx, pool), b.forward_passes - before

    first, first_passes = judged()
    second, second_passes = judged()
    assert first.evidence["base_right"] > 0
    assert {k: v for k, v in second.evidence.items() if k != "mean_js_nats"} == {
        k: v for k, v in first.evidence.items() if k != "mean_js_nats"
    }
    assert second.evidence["mean_js_nats"] == pytest.approx(first.evidence["mean_js_nats"], abs=1e-6)
    assert 0 < second_passes < first_passes


def test_a_store_that_cannot_be_written_is_skipped_and_the_answers_still_come(tiny_model_dir, noisy, tmp_path):
    blocked = tmp_path / "models"
    blocked.write_text("a file where the model cache should be")  # mkdir fails, as root too
    b = backend(tiny_model_dir, noisy, blocked)
    with b.as_base() as base:
        ids, dists = base.answers(prompts(b), [4] * len(QUESTIONS), 16, persist=True)
        fresh_ids, fresh_dists = base.answers(prompts(b), [4] * len(QUESTIONS), 16)
    assert ids == fresh_ids and len(ids) == len(QUESTIONS) and blocked.is_file()
    assert [d.token_ids.tolist() for d in dists] == [d.token_ids.tolist() for d in fresh_dists]
