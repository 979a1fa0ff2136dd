"""Batched greedy decoding: left-padded batches of conversations of different lengths answer exactly as
each conversation alone does (the tiny model, float32); context-aware decoding scores what the formula says, batched
or alone; an answer under quoted examples ends with its first code block, as the endpoint cuts it."""

from __future__ import annotations

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.generate import (
    chat_turns,
    context_guidance,
    ended_with_eos,
    generation_eos_ids,
    greedy_replies,
    greedy_reply,
    guided_rows,
    until_eos,
)
from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import render_chat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTIONS = [  # (question, system prompt): conversations of different lengths
    ("list pods", None),
    ("show the logs of the api deployment in the dev namespace, following them", None),
    ("restart api", "You answer with one shell command."),
    ("which containers run on this host and which ports do they publish?", "Be brief. Answer in one line."),
    ("df", None),
]


def test_a_batch_answers_as_each_conversation_alone(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    alone = [greedy_reply(model, tokenizer, q, system=system, max_new_tokens=12) for q, system in QUESTIONS]
    conversations = [chat_turns(q, system=system) for q, system in QUESTIONS]
    batched = greedy_replies(model, tokenizer, conversations, max_new_tokens=12, batch_size=3)
    assert [r.token_ids for r in batched] == [r.token_ids for r in alone]
    assert all(r.token_ids for r in batched)  # the random model does answer: the comparison is not vacuous


def test_chat_turns_puts_the_system_prompt_before_the_question():
    assert [(t.role, t.content) for t in chat_turns("q", system="s")] == [("system", "s"), ("user", "q")]
    assert [(t.role, t.content) for t in chat_turns("q")] == [("user", "q")]


def test_a_batch_size_below_one_is_refused(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        greedy_replies(model, tokenizer, [chat_turns("q")], batch_size=0)


EXAMPLES = [{"query": "restart the api deployment", "answer": "kubectl rollout restart deployment/api", "language": ""}]


def test_context_aware_decoding_scores_the_examples_against_the_request_alone(tiny_model_dir):
    """Each token greedy under (1 + α) log p(y | examples, request) − α log p(y | request) (Shi et al. 2024), as
    recomputed here from the model's two full forward passes per step, and a different answer from α 0."""
    import torch

    model, tokenizer = load_model_directory(tiny_model_dir)
    asked = chat_turns("restart api")
    quoted = with_examples(asked, EXAMPLES)
    steps = 10
    found = {}
    for alpha in (0.5, 2.0):
        ids = render_chat(tokenizer, quoted, add_generation_prompt=True)
        plain = render_chat(tokenizer, asked, add_generation_prompt=True)
        expected: list[int] = []
        with torch.no_grad():
            for _ in range(steps):
                c = torch.log_softmax(model(torch.tensor([ids + expected])).logits[0, -1], -1)
                u = torch.log_softmax(model(torch.tensor([plain + expected])).logits[0, -1], -1)
                expected.append(int(torch.argmax((1 + alpha) * c - alpha * u)))
        eos = generation_eos_ids(model)
        expected = expected[: next((i for i, t in enumerate(expected) if t in eos), steps)]
        guided = greedy_replies(
            model, tokenizer, [quoted], max_new_tokens=steps, negatives=[asked], context_alpha=alpha
        )[0]
        assert list(guided.token_ids) == expected
        found[alpha] = guided.token_ids
    unguided = greedy_replies(model, tokenizer, [quoted], max_new_tokens=steps)[0].token_ids
    assert unguided != found[2.0], "the guidance changes the answer: the comparison is not vacuous"
    assert greedy_replies(model, tokenizer, [quoted], max_new_tokens=steps, negatives=[asked])[0].token_ids == unguided


def test_a_batch_with_guided_and_plain_rows_answers_as_each_row_alone(tiny_model_dir):
    """Rows with a negative prompt (guided, left-padded in their own batches) and rows without, mixed: each answers as
    it does alone (RoPE: a row's padding shifts positions, not their differences)."""
    model, tokenizer = load_model_directory(tiny_model_dir)
    asked = [chat_turns(q, system=system) for q, system in QUESTIONS]
    conversations = [with_examples(a, EXAMPLES) if i % 2 == 0 else a for i, a in enumerate(asked)]
    negatives = [a if i % 2 == 0 else None for i, a in enumerate(asked)]
    alone = [
        greedy_replies(model, tokenizer, [c], max_new_tokens=8, negatives=[n], context_alpha=2.0)[0].token_ids
        for c, n in zip(conversations, negatives, strict=True)
    ]
    batched = greedy_replies(
        model, tokenizer, conversations, max_new_tokens=8, batch_size=3, negatives=negatives, context_alpha=2.0
    )
    assert [r.token_ids for r in batched] == alone
    with pytest.raises(ValueError, match="2 negative prompts for 5 conversations"):
        greedy_replies(model, tokenizer, conversations, negatives=negatives[:2], context_alpha=2.0)


@pytest.mark.parametrize("banned", [False, True])
def test_guided_rows_decode_as_the_library_guidance_in_one_batch(tiny_model_dir, banned):
    """Prompts and their negative prompts as the two halves of one batch give the tokens transformers' unbatched
    guidance gives each prompt alone, each negative row the same as its prompt's; a processor after the guidance sees
    the guided scores, as it does there; ``greedy_replies`` answers quoted conversations so."""
    import torch
    from transformers import LogitsProcessorList

    model, tokenizer = load_model_directory(tiny_model_dir)
    asked = [chat_turns(q) for q in ("restart api", "which pods run in the dev namespace and since when?")]
    quoted = [with_examples(a, EXAMPLES) for a in asked]
    prompts = [render_chat(tokenizer, q, add_generation_prompt=True) for q in quoted]
    negatives = [render_chat(tokenizer, a, add_generation_prompt=True) for a in asked]
    eos = generation_eos_ids(model)

    class Ban:  # forbids the token the guidance makes likeliest at each step
        def __call__(self, input_ids, scores):
            return scores.scatter(-1, scores.argmax(-1, keepdim=True), float("-inf"))

    then = LogitsProcessorList([Ban()]) if banned else None

    def library(prompt, negative):  # transformers' UnbatchedClassifierFreeGuidanceLogitsProcessor, one prompt
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=10,
                do_sample=False,
                pad_token_id=0,
                logits_processor=then,
                **context_guidance(2.0, [negative], 0),
            )
        return until_eos(out[0, len(prompt) :].tolist(), eos)

    expected = [library(p, n) for p, n in zip(prompts, negatives, strict=True)]
    assert all(expected), "the random model does answer: the comparison is not vacuous"
    kwargs = guided_rows(2.0, prompts, negatives, 0, then=then)
    width = kwargs["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(max_new_tokens=10, do_sample=False, pad_token_id=0, **kwargs)
    rows = [out[r, width:].tolist() for r in range(4)]
    assert rows[:2] == rows[2:]
    assert [until_eos(r, eos) for r in rows[:2]] == expected
    replies = greedy_replies(
        model, tokenizer, quoted, max_new_tokens=10, negatives=asked, context_alpha=2.0, logits_processor=then
    )
    assert [list(r.token_ids) for r in replies] == expected
    with pytest.raises(ValueError, match="alpha > 0"):
        guided_rows(0.0, prompts, negatives, 0)
    with pytest.raises(ValueError, match="one non-empty negative prompt per prompt"):
        guided_rows(2.0, prompts, [negatives[0], []], 0)
    with pytest.raises(ValueError, match="one non-empty negative prompt per prompt"):
        guided_rows(2.0, prompts, negatives[:1], 0)


def test_context_guidance_is_off_at_alpha_zero_and_needs_a_prompt_per_row():
    assert context_guidance(0.0, [], 0) == {}
    kwargs = context_guidance(0.5, [[1, 2, 3], [4]], 0)
    assert kwargs["guidance_scale"] == 1.5
    assert kwargs["negative_prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert kwargs["negative_prompt_attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    with pytest.raises(ValueError, match="one non-empty negative prompt per row"):
        context_guidance(0.5, [[1], []], 0)


ANSWER = "Run it:\n```bash\nls -l\n```\nThis lists the files, one per line."
"""An answer that gives its command in a fenced block, then goes on."""


class Forced:
    """A logits processor that makes greedy decoding write ``token_ids``, then the end-of-sequence id ``eos``."""

    def __init__(self, token_ids: list[int], eos: int) -> None:
        self.token_ids, self.eos, self.width = token_ids, eos, None

    def __call__(self, input_ids, scores):
        self.width = self.width or input_ids.shape[1]
        step = input_ids.shape[1] - self.width
        forced = self.token_ids[step] if step < len(self.token_ids) else self.eos
        scores[:] = float("-inf")
        scores[:, forced] = 0.0
        return scores


def test_an_answer_under_quoted_examples_ends_with_its_first_code_block_as_the_endpoint_cuts_it(tiny_model_dir):
    """The base's answer under quoted examples ends with the closing fence of its first block: generation stops at
    the token that ends the fence's line, at any α (0 here), and the endpoint's text tracker cuts the same tokens to
    the same text; a plain answer goes on."""
    from learnerd.ml.serving import _TextTracker

    model, tokenizer = load_model_directory(tiny_model_dir)
    token_ids = tokenizer.encode(ANSWER, add_special_tokens=False)
    assert tokenizer.decode(token_ids) == ANSWER
    eos = min(generation_eos_ids(model))
    asked = chat_turns("list the files")
    quoted = with_examples(asked, [{"query": "list files", "answer": "ls -l", "language": "bash"}])

    def reply(negatives):
        return greedy_replies(
            model,
            tokenizer,
            [quoted],
            max_new_tokens=64,
            negatives=negatives,
            logits_processor=[Forced(token_ids, eos)],
        )[0]

    plain, ended = reply(None), reply([asked])
    assert plain.text == ANSWER and list(plain.token_ids) == token_ids
    assert ended.text == "Run it:\n```bash\nls -l\n```"
    assert 0 < len(ended.token_ids) < len(token_ids) and list(ended.token_ids) == token_ids[: len(ended.token_ids)]
    assert "\n" in tokenizer.decode(ended.token_ids[-1:]), "it stopped at the token that ends the fence's line"

    tracker, streamed = _TextTracker(tokenizer, (), end_at_block=True), []
    for n, token in enumerate(ended.token_ids, 1):
        streamed.append(tracker.add(token))
        assert tracker.stopped == (n == len(ended.token_ids)), "the tracker stops at the same token"
    assert "".join(streamed) + tracker.flush() == ended.text


def test_an_answer_under_quoted_examples_that_opens_no_block_ends_where_one_had_to_open(tiny_model_dir):
    """A base answering under quoted examples in prose, with no code block, stops after
    ``BLOCK_OPENS_WITHIN`` tokens, as the endpoint's text tracker does; one that opened its block by then ends with
    the block, however long its prose before it; a plain answer goes on."""
    from learnerd.ml.serving import _TextTracker
    from learnerd.store.suggestions import BLOCK_OPENS_WITHIN

    model, tokenizer = load_model_directory(tiny_model_dir)
    eos = min(generation_eos_ids(model))
    asked = chat_turns("list the files")
    quoted = with_examples(asked, [{"query": "list files", "answer": "ls -l", "language": "bash"}])
    prose = " ".join(["the files are listed one per line"] * 3)
    late = "Run:\n```bash\nls -l" + " --color=never" * 6 + "\n```\nThat is all."  # its block opens early, closes late

    def reply(text, negatives):
        ids = tokenizer.encode(text, add_special_tokens=False)
        forced = [Forced(ids, eos)]
        answer = greedy_replies(
            model, tokenizer, [quoted], max_new_tokens=len(ids) + 1, negatives=negatives, logits_processor=forced
        )
        return ids, answer[0]

    ids, plain = reply(prose, None)
    assert len(ids) > BLOCK_OPENS_WITHIN + 10 and list(plain.token_ids) == ids
    _, ended = reply(prose, [asked])
    assert list(ended.token_ids) == ids[:BLOCK_OPENS_WITHIN]
    assert ended.text == tokenizer.decode(ids[:BLOCK_OPENS_WITHIN], skip_special_tokens=True)
    tracker = _TextTracker(tokenizer, (), end_at_block=True)
    streamed = [tracker.add(t) for t in ids[:BLOCK_OPENS_WITHIN]]
    assert tracker.stopped and "".join(streamed) + tracker.flush() == ended.text, "the tracker stops at the same token"
    _, blocked = reply(late, [asked])
    block = late[: late.index("\nThat is all.")]
    closed = len(tokenizer.encode(block, add_special_tokens=False))
    assert len(tokenizer.encode("Run:\n```bash\n", add_special_tokens=False)) < BLOCK_OPENS_WITHIN < closed
    assert blocked.text == block, "a block opened in time ends the answer"


def test_an_answer_ended_with_eos_when_it_stopped_short_and_not_where_its_block_ends_it():
    from learnerd.store.suggestions import BLOCK_OPENS_WITHIN

    prose = "It lists the files"
    assert ended_with_eos(prose, 5, 20, at_block=False)
    assert ended_with_eos(prose, 5, 20, at_block=True), "no block opened within its first ids: an EOS id ended it"
    assert not ended_with_eos(prose, 20, 20, at_block=False), "the budget ended it"
    assert not ended_with_eos(ANSWER.split("This")[0], 9, 20, at_block=True), "its closed block ended it"
    long = BLOCK_OPENS_WITHIN
    assert not ended_with_eos(prose, long, long + 16, at_block=True), "cut where no block opened, budget left"
    assert ended_with_eos(prose, long, long + 16, at_block=False)
