"""Batched greedy decoding: left-padded batches of conversations of different lengths answer exactly as
each conversation alone does (the tiny model, float32)."""

from __future__ import annotations

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.generate import chat_turns, greedy_replies, greedy_reply

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTIONS = [
    ("list pods", ()),
    ("show the logs of the api deployment in the dev namespace, following them", ()),
    ("restart api", (("list pods", "kubectl get pods"),)),
    ("which containers run on this host and which ports do they publish?", (("a", "b"), ("c", "d"))),
    ("df", ()),
]


def test_a_batch_answers_as_each_conversation_alone(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    alone = [greedy_reply(model, tokenizer, q, shots=shots, max_new_tokens=12) for q, shots in QUESTIONS]
    conversations = [chat_turns(q, shots=shots) for q, shots in QUESTIONS]
    batched = greedy_replies(model, tokenizer, conversations, max_new_tokens=12, batch_size=3)
    assert [r.token_ids for r in batched] == [r.token_ids for r in alone]
    assert all(r.token_ids for r in batched)  # the random model does answer: the comparison is not vacuous


def test_chat_turns_orders_system_shots_then_the_question():
    turns = chat_turns("q", system="s", shots=[("q1", "a1")])
    assert [(t.role, t.content) for t in turns] == [("system", "s"), ("user", "q1"), ("assistant", "a1"), ("user", "q")]


def test_a_batch_size_below_one_is_refused(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        greedy_replies(model, tokenizer, [chat_turns("q")], batch_size=0)
