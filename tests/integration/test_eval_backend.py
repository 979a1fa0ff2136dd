"""The differential backend on the built-in tiny model with a (random, untrained) LoRA adapter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks.bench_eval import noisy_lora
from learnerd.eval import backend as backend_module
from learnerd.eval.backend import (
    DifferentialBackend,
    EvaluationCancelled,
    NonFiniteLogitsError,
    _batches,
    _shared_context_batches,
)
from learnerd.eval.inputs import Encoder
from learnerd.eval.suite import evaluate
from learnerd.ml.base_model import load_model_directory
from learnerd.ml.divergence import divergence
from learnerd.ml.generate import chat_turns, greedy_answer, greedy_replies
from learnerd.ml.retrieved_examples import with_examples
from learnerd.store.dlm import parse_text

pytestmark = pytest.mark.usefixtures("one_torch_thread")
QUESTION = "What is the capital of France?"
EXAMPLES = [{"query": "restart the api deployment", "answer": "kubectl rollout restart deployment/api", "language": ""}]
FLOAT32_REL = 1e-5
"""Relative agreement of values computed from float32 logits in different orders: float32's eps is 1.2e-7,
and a forward pass accumulates rounding over its layers; 1e-5 leaves a wide margin over what is seen (≤ 1e-7)."""
FLOAT32_ATOL = 1e-5
"""Absolute agreement (nats) of float32-derived log-probabilities of magnitude ≈ 6 (≈ 20 ulps)."""


@pytest.fixture
def backend(tiny_model_dir):
    """The tiny model with a fresh LoRA adapter whose B matrices are seeded noise (a fresh adapter's are
    zero, which would make both views equal)."""
    peft_model, tokenizer = noisy_lora(tiny_model_dir, scale=0.5)
    return DifferentialBackend(peft_model.eval(), tokenizer)


def test_the_views_toggle_the_adapter(backend, tiny_model_dir):
    ids = Encoder(backend.tokenizer).prompt(QUESTION)
    plain, _ = load_model_directory(tiny_model_dir)
    with torch.no_grad():
        reference = torch.log_softmax(plain(input_ids=torch.tensor([list(ids)])).logits[0, -1].double(), -1)
    with backend.as_base() as base:
        base_dist = base.next_token_dist(ids, top_k=backend.vocab_size)
    with backend.as_finetuned() as ft:
        ft_dist = ft.next_token_dist(ids, top_k=backend.vocab_size)
    # float32 logits through two code paths (peft's disabled adapter, an attention mask): a few float32 ulps
    # apart; at |logprob| ≈ ln 262 ≈ 5.6 one ulp is 4.8e-7
    np.testing.assert_allclose(base_dist.logprobs, reference[base_dist.token_ids].numpy(), rtol=0, atol=FLOAT32_ATOL)
    assert divergence(base_dist, ft_dist, "js") > 0.01  # the adapter is on in the fine-tuned view only
    with pytest.raises(RuntimeError, match="inside the base view"), backend.as_base(), backend.as_finetuned():
        pass


def test_a_null_adapter_is_noise_of_the_same_shape_and_is_put_back(backend):
    ids = Encoder(backend.tokenizer).prompt(QUESTION)
    weights = {n: p.detach().clone() for n, p in backend.model.named_parameters() if "lora_" in n}
    with backend.as_finetuned() as ft:
        before = ft.next_token_dist(ids, top_k=16)
    with backend.as_null_adapter(1000) as null:
        noisy = {n: p.detach().clone() for n, p in backend.model.named_parameters() if "lora_" in n}
        null_dist = null.next_token_dist(ids, top_k=16)
    with backend.as_null_adapter(1000) as null:
        assert null.next_token_dist(ids, top_k=16).logprobs.tolist() == null_dist.logprobs.tolist()  # seeded
    assert all(noisy[n].shape == w.shape and not torch.equal(noisy[n], w) for n, w in weights.items())
    assert all(abs(float(noisy[n].std()) - 0.02) < 0.01 for n in noisy)
    assert all(torch.equal(p, weights[n]) for n, p in backend.model.named_parameters() if "lora_" in n)
    with backend.as_finetuned() as ft:
        assert ft.next_token_dist(ids, top_k=16).logprobs.tolist() == before.logprobs.tolist()


def test_top_k_keeps_the_tail_and_logprob_is_the_sum_of_next_token_logprobs(backend):
    encoder = Encoder(backend.tokenizer)
    scored = encoder.pair(QUESTION, "Paris")
    with backend.as_finetuned() as ft:
        top8 = ft.next_token_dist(scored.context, top_k=8)
        full = ft.next_token_dist(scored.context, top_k=10_000)
        by_step = 0.0
        for i, token in enumerate(scored.target):
            dist = ft.next_token_dist(scored.context + scored.target[:i], top_k=backend.vocab_size)
            by_step += float(dist.logprobs[list(dist.token_ids).index(token)])
        total = ft.logprob(scored.context, scored.target)
    assert top8.token_ids.size == 8 and 0.0 < top8.tail_mass < 1.0
    assert top8.tail_mass == pytest.approx(1.0 - math.fsum(np.exp(top8.logprobs)))
    assert full.token_ids.size == backend.vocab_size and full.tail_mass == pytest.approx(0.0, abs=1e-9)
    # each term comes from float32 logits of a forward pass of another length (another summation order):
    # they agree to float32's precision, not float64's (4e-8 relative was seen on another machine)
    assert total == pytest.approx(by_step, rel=FLOAT32_REL) and total < 0


def test_scoring_a_continuation_reads_the_kv_cache_by_the_models_own_name(backend):
    """A target of several tokens reuses its context's KV cache: read from the output and passed back under the name
    the installed transformers takes (``cache`` from 5 on), so it warns of no deprecated name. transformers logs
    the warning once per process (``warning_once``): the test forgets that it was logged."""
    import logging

    from transformers.utils import logging as hf_logging

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    hf_logger = hf_logging.get_logger("transformers")
    hf_logger.warning_once.cache_clear()
    hf_logger.addHandler(handler)
    try:
        scored = Encoder(backend.tokenizer).pair(QUESTION, "Paris is the capital")
        assert len(scored.target) > 1
        with backend.as_finetuned() as ft:
            assert ft.logprob(scored.context, scored.target) < 0
    finally:
        hf_logger.removeHandler(handler)
    assert not [r for r in records if "deprecated" in r], records


def test_generation_is_the_trainers_greedy_answer(backend):
    encoder = Encoder(backend.tokenizer)
    with backend.as_finetuned() as ft:
        mine = encoder.decode(ft.generate(encoder.prompt(QUESTION), 12))
    assert mine == greedy_answer(backend.model, backend.tokenizer, QUESTION, max_new_tokens=12)
    with backend.as_base() as base:
        base_answer = encoder.decode(base.generate(encoder.prompt(QUESTION), 12))
    with backend.model.disable_adapter():
        assert base_answer == greedy_answer(backend.model, backend.tokenizer, QUESTION, max_new_tokens=12)


def test_a_quoted_prompt_is_decoded_as_the_endpoint_decodes_it(backend):
    """``generate_many`` with negative prompts (the dialogue probe's quoted turns) gives what ``greedy_replies`` gives
    with context-aware decoding — the decoding the endpoint and the benchmarks use — and the plain prompts beside them
    what they give without."""
    encoder = Encoder(backend.tokenizer)
    asked = [chat_turns(q) for q in (QUESTION, "restart api", "list the pods in dev")]
    quoted = [with_examples(a, EXAMPLES) for a in asked]
    prompts = [encoder.dialogue(quoted[0]), encoder.dialogue(asked[1]), encoder.dialogue(quoted[2])]
    negatives = [encoder.dialogue(asked[0]), None, encoder.dialogue(asked[2])]
    with backend.as_finetuned() as ft:
        mine = ft.generate_many(prompts, [10, 10, 10], negatives=negatives, context_alpha=2.0)
        unguided = ft.generate_many(prompts, [10, 10, 10])
    expected = greedy_replies(
        backend.model,
        backend.tokenizer,
        [quoted[0], asked[1], quoted[2]],
        max_new_tokens=10,
        negatives=[asked[0], None, asked[2]],
        context_alpha=2.0,
    )
    assert mine == [list(r.token_ids) for r in expected]
    assert mine[1] == unguided[1] and mine != unguided, "only the quoted prompts are decoded otherwise"


def test_a_quoted_answer_carries_the_command_the_view_chooses_as_the_endpoint_does(backend):
    """``View.choose`` (the dialogue probe's quoted turns) gives the answer :func:`learnerd.ml.choice.chosen_replies`
    gives for the same greedy replies — the choice the endpoint and the benchmarks make — in the view's state."""
    from learnerd.ml.choice import chosen_replies

    encoder = Encoder(backend.tokenizer)
    asked = [chat_turns(q) for q in ("restart api", "list the pods in dev")]
    quoted = [with_examples(a, EXAMPLES) for a in asked]
    prompts = [encoder.dialogue(q) for q in quoted]
    negatives = [None, encoder.dialogue(asked[1])]
    commands = [[e["answer"] for e in EXAMPLES]] * 2
    with backend.as_finetuned() as ft:
        answers = ft.generate_many(prompts, [64, 64], negatives=negatives, context_alpha=0.5)
        chosen = ft.choose(prompts, answers, commands, 10.0, [64, 64], negatives=negatives, context_alpha=0.5)
        kept = ft.choose(prompts, answers, [[], []], 10.0, [64, 64], negatives=negatives, context_alpha=0.5)
        replies = greedy_replies(
            backend.model, backend.tokenizer, quoted, max_new_tokens=64, negatives=[None, asked[1]], context_alpha=0.5
        )
        expected = chosen_replies(
            backend.model, backend.tokenizer, quoted, replies, commands, 10.0, negatives=[None, asked[1]], alpha=0.5
        )
    assert [encoder.decode(ids) for ids in chosen] == [c.text for c in expected]
    assert kept == answers and chosen != answers, "the widest margin takes the quoted command: not vacuous"
    with backend.as_finetuned() as ft, pytest.raises(ValueError, match="one answer"):
        ft.choose(prompts, answers, commands[:1], 10.0, [64, 64])


def test_non_finite_logits_are_refused(backend):
    with torch.no_grad():
        for name, param in backend.model.named_parameters():
            if "lora_B" in name and "mlp.down_proj" in name:  # straight into the residual stream
                param.fill_(math.nan)
    with pytest.raises(NonFiniteLogitsError, match="the ft view produced"):
        backend.check_finite()
    document = parse_text("---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\nText.\n")
    report = evaluate(backend, document, base_model_id="b", adapter_id="a")
    assert [(p.kind, p.verdict.value) for p in report.probes] == [("preflight", "error")]
    assert "non-finite" in report.probes[0].message and report.score.overall == 0.0


def test_batches_give_what_one_input_at_a_time_gives(backend, monkeypatch):
    encoder = Encoder(backend.tokenizer)
    questions = [QUESTION, "Who wrote Hamlet?", "Hi", "How many legs does a spider have, in all?"]
    prompts = [encoder.prompt(q) for q in questions]
    scored = [encoder.pair(q, a) for q, a in zip(questions, ["Paris", "Shakespeare", "Hi", "Eight"], strict=True)]
    backend.batch_tokens = 2 * max(map(len, prompts))  # several batches, each padded
    with backend.as_finetuned() as ft:
        passes = backend.forward_passes
        dists = ft.next_token_dists(prompts, top_k=backend.vocab_size)
        assert backend.forward_passes - passes < len(prompts)
        for prompt, dist in zip(prompts, dists, strict=True):
            alone = ft.next_token_dist(prompt, top_k=backend.vocab_size)
            by_id = np.argsort(dist.token_ids), np.argsort(alone.token_ids)  # whole distributions, no rank ties
            np.testing.assert_allclose(dist.logprobs[by_id[0]], alone.logprobs[by_id[1]], rtol=0, atol=FLOAT32_ATOL)
        items = [(s.context, s.target) for s in scored]
        items += [(scored[0].context, encoder.pair(QUESTION, "Lyon").target), (scored[1].context, scored[1].target[:1])]
        backend.batch_tokens, passes = 10_000, backend.forward_passes
        batched = ft.logprobs(items)  # one batch: its 4 distinct contexts in one pass, then all 6 targets
        assert backend.forward_passes - passes == 2
        assert batched == pytest.approx([ft.logprob(c, t) for c, t in items], rel=FLOAT32_REL)
        by_full_pass = [float(torch.log_softmax(ft._logits([[*c, *t]])[0][len(c) - 1 : -1].double(), -1)
                              .gather(1, torch.tensor(t).unsqueeze(1)).sum()) for c, t in items]  # fmt: skip
        assert batched == pytest.approx(by_full_pass, rel=FLOAT32_REL)  # the cache gives what one pass gives
        budgets = [12, 3, 7, 1]
        monkeypatch.setattr(backend_module, "GENERATION_ROWS", 2)  # two generations of two, each left-padded
        answers = ft.generate_many(prompts, budgets)
        assert answers == [ft.generate(p, b) for p, b in zip(prompts, budgets, strict=True)]
        assert all(len(a) <= b for a, b in zip(answers, budgets, strict=True)) and any(answers)
        assert ft.generate_many([], []) == []  # answer_retention's led answers when it lost none


def test_a_generation_batch_holds_at_most_its_rows_and_its_padded_tokens():
    assert _batches([5, 5, 5, 5, 5], max_tokens=100, max_rows=2) == [[0, 1], [2, 3], [4]]
    assert _batches([9, 5, 5, 4], max_tokens=10, max_rows=8) == [[0], [1, 2], [3]]  # 9 + 9 > 10: padded to the longest
    assert _batches([5, 5, 5], max_tokens=100) == [[0, 1, 2]]


def test_the_targets_of_one_context_share_a_batch_and_its_context_runs_once():
    """section_internalization's shape: each context (a section's question) with several targets. Sorted by length
    alone, the targets of one context would scatter over batches, each running the context again."""
    a, b, c = (1,) * 6, (2,) * 6, (3,) * 4
    items = [(a, (9, 9)), (b, (9, 9, 9)), (a, (9,) * 4), (c, (9, 9)), (b, (9,)), (a, (9, 9))]
    # a's three: 6 + 3 × 3 = 15; b too: 2 × 6 + 4 × 3 = 24 > 20; b's two and c: 2 × 6 + 3 × 2 = 18
    assert _shared_context_batches(items, max_tokens=20) == [[2, 0, 5], [1, 4, 3]]
    assert _shared_context_batches(items, max_tokens=12) == [[2, 0], [5], [1, 4], [3]]
    assert _shared_context_batches(items, max_tokens=1) == [[i] for i in (2, 0, 5, 1, 4, 3)]  # each alone
    assert _shared_context_batches(items, max_tokens=10_000) == [[2, 0, 5, 1, 4, 3]]  # 3 × 6 + 6 × 3 tokens


def test_a_set_cancel_event_stops_the_next_batch(backend):
    backend.cancel.set()
    with pytest.raises(EvaluationCancelled), backend.as_base() as base:
        base.next_token_dist([1, 2, 3])


def test_a_cancel_during_a_generation_stops_it_at_the_next_decoding_step(backend):
    prompt, budget = Encoder(backend.tokenizer).prompt(QUESTION), 64
    cancel_at: int | None = None
    steps = 0

    def count_step(*_: object) -> None:  # the output head runs once per decoding step
        nonlocal steps
        steps += 1
        if steps == cancel_at:
            backend.cancel.set()  # as the daemon's drain does, from another thread

    hook = backend.model.get_output_embeddings().register_forward_hook(count_step)
    try:
        with backend.as_finetuned() as ft:
            ft.generate(prompt, budget)
            uncancelled, steps, cancel_at = steps, 0, 3
            with pytest.raises(EvaluationCancelled):
                ft.generate(prompt, budget)
    finally:
        hook.remove()
    assert uncancelled > 10, "the generation would run on for many more steps"
    assert steps == cancel_at, "no decoding step after the one during which the cancel event was set"
