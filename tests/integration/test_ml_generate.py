"""Batched greedy decoding: left-padded batches of conversations of different lengths answer exactly as
each conversation alone does (the tiny model, float32)."""

from __future__ import annotations

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.generate import chat_turns, greedy_replies, greedy_reply

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
