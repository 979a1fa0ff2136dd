"""Retrieval-augmented training rows (the retrieval ingredient), with the real bundled MiniLM embedder."""

from __future__ import annotations

import dataclasses
import random

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.retrieved_examples import EXAMPLES_HEADER, quote_example
from learnerd.ml.rows import ChatMessage, TrainingRow, encode_rows
from learnerd.training.config import TrainingConfig
from learnerd.training.ingredients.multi_turn import multi_turn_rows
from learnerd.training.ingredients.retrieval import (
    FRESH_PREFIX,
    QUOTED_MULTI_TURN_PREFIX,
    RETRIEVAL_PREFIX,
    REWRITE_PREFIX,
    fresh_rows,
    quoted_multi_turn_rows,
    retrieval_rows,
    rewrite_rows,
)
from learnerd.training.new_tasks import command_words, new_task
from learnerd.training.rewrites import rewrite_question
from learnerd.training.worker import TrainingRequest, retention_rows
from tests.qa_pairs import QA_PAIRS

QA_ROWS = [TrainingRow.chat(f"qa{i:02d}", q, a) for i, (q, a) in enumerate(QA_PAIRS)]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def quoted_pairs(system: str) -> list[tuple[str, str]]:
    """The (question, answer) pairs of ``QA_PAIRS`` quoted in ``system``, in the order they appear there."""
    found = [(system.find(quote_example(q, a)), (q, a)) for q, a in QA_PAIRS if quote_example(q, a) in system]
    return [pair for _, pair in sorted(found)]


def test_each_pair_is_trained_once_more_under_the_examples_nearest_to_its_question(minilm):
    """Half the rows quote their own pair first (a prompt already learned: retrieval's best hit is itself),
    the others only pairs with another answer, nearest first by MiniLM's cosine similarity."""
    rows = retrieval_rows(QA_ROWS, 3, minilm.embed, seed=7)
    assert [r.section_id for r in rows] == [f"{RETRIEVAL_PREFIX}{r.section_id}" for r in QA_ROWS]
    vectors = minilm.embed([q for q, _ in QA_PAIRS])
    own_first = 0
    for i, (row, (question, answer)) in enumerate(zip(rows, QA_PAIRS, strict=True)):
        system, user, reply = row.messages
        assert (user, reply) == (ChatMessage("user", question), ChatMessage("assistant", answer))
        assert system.role == "system" and system.content.startswith(EXAMPLES_HEADER + "\n\n> ")
        quoted = quoted_pairs(system.content)
        assert len(quoted) == 3 and len({a for _, a in quoted}) == 3
        if quoted[0] == (question, answer):
            own_first += 1
            continue
        assert answer not in {a for _, a in quoted}, "a row without its own pair quotes no pair with its answer"
        others = [j for j, (_, a) in enumerate(QA_PAIRS) if a != answer]
        nearest = max(others, key=lambda j: float(vectors[i] @ vectors[j]))
        assert quoted[0] == QA_PAIRS[nearest]
    assert own_first == len(QA_PAIRS) // 2


def test_the_share_of_rows_that_quote_their_own_pair_is_retrieval_own(minilm):
    """``own`` 1.0 (the routed recipe's): every row quotes its own pair first; 0.0: none quotes its answer."""
    every = retrieval_rows(QA_ROWS, 3, minilm.embed, seed=7, own=1.0)
    assert [quoted_pairs(r.messages[0].content)[0] for r in every] == list(QA_PAIRS)
    none = retrieval_rows(QA_ROWS, 3, minilm.embed, seed=7, own=0.0)
    for row, (_, answer) in zip(none, QA_PAIRS, strict=True):
        assert answer not in {a for _, a in quoted_pairs(row.messages[0].content)}


def test_the_documents_system_prompt_stays_first_and_too_few_pairs_give_no_rows(minilm):
    rows = [TrainingRow.chat(f"s{i}", q, a, system="Answer with one word.") for i, (q, a) in enumerate(QA_PAIRS[:4])]
    for row in retrieval_rows(rows, 2, minilm.embed, seed=1):
        system = row.messages[0]
        assert system.content.startswith(f"Answer with one word.\n\n{EXAMPLES_HEADER}\n\n")
        assert len(quoted_pairs(system.content)) == 2
    assert retrieval_rows(rows, 0, minilm.embed, seed=1) == []
    assert retrieval_rows(rows[:1], 3, minilm.embed, seed=1) == []
    prose = [TrainingRow.plain("p", "Some prose.")]
    assert retrieval_rows(prose + rows[:2], 3, minilm.embed, seed=1)[0].section_id == f"{RETRIEVAL_PREFIX}s0"


def test_a_quoted_dialogue_quotes_the_pairs_nearest_to_its_last_question_its_own_first(minilm):
    """As the endpoint serves a dialogue's last turn: the examples retrieved for the last user message, a learned
    task's own example first, in the system message; every turn of the conversation kept, the pairs of the dealt
    multi-turn rows (:func:`multi_turn_rows` with the same seed)."""
    rows = quoted_multi_turn_rows(QA_ROWS, 3, 5, minilm.embed, seed=3)
    assert [r.section_id for r in rows] == [f"{QUOTED_MULTI_TURN_PREFIX}{n}" for n in range(5)]
    vectors = minilm.embed([q for q, _ in QA_PAIRS])
    for row, plain in zip(rows, multi_turn_rows(QA_ROWS, 5, seed=3), strict=True):
        system, *turns = row.messages
        assert tuple(turns) == plain.messages and system.role == "system"
        last = [q for q, _ in QA_PAIRS].index(turns[-2].content)
        nearest = sorted(range(len(QA_PAIRS)), key=lambda j: -float(vectors[last] @ vectors[j]))[:3]
        assert quoted_pairs(system.content) == [QA_PAIRS[j] for j in nearest]
        assert quoted_pairs(system.content)[0] == (turns[-2].content, turns[-1].content)
    assert quoted_multi_turn_rows(QA_ROWS, 0, 5, minilm.embed, seed=3) == []
    assert quoted_multi_turn_rows(QA_ROWS, 3, 0, minilm.embed, seed=3) == []


def test_the_train_worker_adds_them_after_the_document_rows_and_they_encode_whole(tiny_model_dir, tmp_path):
    model, tokenizer = load_model_directory(tiny_model_dir)
    config = TrainingConfig(retrieval_k=3)
    request = TrainingRequest(str(tiny_model_dir), str(tmp_path), tuple(QA_ROWS), config, replay_cache=None)
    rows, rehearsal, _ = retention_rows(model, tokenizer, request)
    assert rows[:20] == QA_ROWS and len(rows) == 40 and rehearsal == []
    assert all(r.section_id.startswith(RETRIEVAL_PREFIX) for r in rows[20:])
    # Rehearsed pairs are rehearsed with their retrieval rows, and an epoch's share counts the rows they bring
    # (4 pairs an epoch: 8 rows, as 4 new pairs would be); neighbours come from all the pairs.
    split = dataclasses.replace(request, rows=tuple(QA_ROWS[:5]), rehearsal=tuple(QA_ROWS[5:]), rehearsal_per_epoch=4)
    every, rehearsed, per_epoch = retention_rows(model, tokenizer, split)
    assert [r.section_id for r in every] == [*(r.section_id for r in QA_ROWS[:5]), *(r.section_id for r in rows[20:25])]
    assert rehearsed == [*QA_ROWS[5:], *rows[25:]] and per_epoch == 8
    encoded, skipped = encode_rows(tokenizer, rows, config.sequence_len)
    assert skipped == [] and len(encoded) == 40
    plain, augmented = encoded[0], encoded[20]
    assert len(augmented.input_ids) > len(plain.input_ids)
    assert augmented.loss_tokens == plain.loss_tokens, "the loss covers the answer only, as in the plain row"


def test_each_rewrite_asks_the_pair_in_other_words_under_the_block_its_rewrite_retrieves(minilm):
    """A rewrite row trains the pair's answer after a reworded question, under the k pairs nearest to the rewrite:
    its own pair among them when retrieval finds it (as for a logged task asked anew)."""
    rows = rewrite_rows(QA_ROWS, 3, 2, minilm.embed, seed=7)
    assert len(rows) == 2 * len(QA_ROWS)
    questions = [q for q, _ in QA_PAIRS]
    vectors = minilm.embed(questions)
    own_quoted = 0
    for row in rows:
        _, pair_id = row.section_id.removeprefix(REWRITE_PREFIX).split(":", 1)
        question, answer = QA_PAIRS[int(pair_id.removeprefix("qa"))]
        system, user, reply = row.messages
        assert reply == ChatMessage("assistant", answer)
        assert user.content != question and user.content in rewrite_question(question, 2, seed=f"7:{pair_id}")
        quoted = quoted_pairs(system.content)
        asked = minilm.embed([user.content])[0]
        assert quoted[0] == max(QA_PAIRS, key=lambda qa: float(asked @ vectors[questions.index(qa[0])]))
        own_quoted += (question, answer) in quoted
    assert own_quoted > len(rows) // 2, "rewrites keep the task's words, so retrieval mostly finds their own pair"
    assert rewrite_rows(QA_ROWS, 3, 0, minilm.embed, seed=7) == rewrite_rows(QA_ROWS, 0, 2, minilm.embed, seed=7) == []


def test_rewrites_keep_the_context_lines_and_the_tasks_words():
    question = "# yamllint\nA linter for YAML files.\nLint a file."
    rewrites = rewrite_question(question, 4, seed=3)
    assert len(rewrites) == 4 and len(set(rewrites)) == 4
    for text in rewrites:
        context, last = text.rsplit("\n", 1)
        assert context == "# yamllint\nA linter for YAML files." and last != "Lint a file."
        assert "lint" in last and "file" in last
    assert rewrite_question(question, 4, seed=3) == rewrites, "seeded"
    assert rewrite_question("   ", 3, seed=1) == [] and rewrite_question("List pods", 0, seed=1) == []


def test_a_new_task_replaces_every_word_of_the_command_in_the_request_too():
    question, command = "Find files named tecmint.txt of owner root", "find / -user root -name tecmint.txt"
    assert command_words(command) == ["tecmint.txt", "find", "root"]  # longest first; no options, no "/"
    new_question, new_command = new_task(question, command, random.Random(1))
    old, new = command.split(), new_command.split()
    assert [w for w in new if w.startswith("-") or w == "/"] == ["/", "-user", "-name"]
    assert all(a != b for a, b in zip(old, new, strict=True) if not a.startswith("-") and a != "/")
    assert new[3].islower() and len(new[3]) == 4 and len(new[5]) == len("tecmint.txt") and new[5][7] == "."  # shape
    assert new_question == f"Find files named {new[5]} of owner {new[3]}", "a word of both changes in both"
    assert new_task(question, command, random.Random(1)) == (new_question, new_command), "seeded"
    up, cd = new_task("Go up", "cd ..", random.Random(1)) or ("", "")
    assert up == "Go up" and cd.endswith(" ..") and len(cd) == len("cd ..") and cd != "cd .."
    assert new_task("Show it", "- / {}", random.Random(1)) is None
    # from a vocabulary (the document's other commands' words), a word of letters becomes another such word
    vocabulary = ["grep", "ls", "find", "401", "x.txt"]
    _, drawn = new_task(question, command, random.Random(2), vocabulary) or ("", "")
    assert drawn.split()[0] in {"grep", "ls"} and drawn.split()[3] in {"grep", "ls", "find"} - {"root"}
    assert drawn.split()[5] not in vocabulary and len(drawn.split()[5]) == len("tecmint.txt"), "not letters: a shape"


def test_fresh_rows_ask_a_new_task_in_other_words_under_a_block_that_quotes_it_first(minilm):
    """Each fresh row's answer is a command no document pair has, quoted first in its block (the oracle), and its
    request is a rewrite of the new task's question; the other quoted examples are the document's nearest pairs."""
    rows = fresh_rows(QA_ROWS, 3, 30, minilm.embed, seed=7)
    assert len(rows) == 30 and len({r.section_id for r in rows}) == 30
    answers = {a for _, a in QA_PAIRS}
    for n, row in enumerate(rows):
        assert row.section_id.startswith(f"{FRESH_PREFIX}{n}:qa")
        system, user, reply = row.messages
        assert system.role == "system" and user.role == "user" and reply.role == "assistant"
        assert reply.content not in answers, "a task the adapter never trained"
        first = system.content.split("\n\n> ", 1)[1]
        assert first.split("\n\n```", 1)[0] != user.content, "asked in other words than its quoted question"
        assert f"```\n{reply.content}\n```" in system.content.split("\n\n> ")[1], "the oracle is quoted first"
        assert len(quoted_pairs(system.content)) == 2, "and the document's 2 nearest pairs"
    assert fresh_rows(QA_ROWS, 3, 30, minilm.embed, seed=7) == rows, "seeded"
    assert fresh_rows(QA_ROWS, 0, 5, minilm.embed, seed=7) == fresh_rows(QA_ROWS, 3, 0, minilm.embed, seed=7) == []
