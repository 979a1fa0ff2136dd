"""Retrieval-augmented rows: each Q/A pair trained once more under a block of its nearest pairs, quoted as the
OpenAI-compatible endpoint quotes retrieved examples (:func:`learnerd.ml.retrieved_examples.with_examples`,
``[serve] rag_k``), so the adapter learns to answer with that block in front of it — from the examples when one
answers the question, from what it learned when none does (docs/retention.md, "Retrieval-augmented rows"). This is
RAFT's recipe (Zhang et al., "RAFT: Adapting Language Model to Domain Specific RAG", 2024: train under the
retrieved documents, distractors included).

With ``retrieval_rewrites`` each pair is also asked in other words (:mod:`learnerd.training.rewrites`) under the
block its rewrite retrieves, so the adapter learns to take a quoted example's answer for a request worded unlike
the example's question — as a person asks a task they logged (PAFT: prompt-agnostic fine-tuning, 2025).

With ``fresh_rows`` a cycle also trains tasks it has never seen, each answered only by the example quoted first:
a pair with a new command (:mod:`learnerd.training.new_tasks`), asked in other words, under a block of it and
the pairs nearest to it (the pair it came from among them when near). Every other row's answer is one the adapter
memorises, so without these it learns to answer from memory and ignores an example logged since its cycle (RAFT's
oracle document: the answer is in the context, not in the weights)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import ChatMessage, TrainingRow
from learnerd.training import new_tasks, rewrites
from learnerd.training.ingredients import multi_turn, spec

MAX_RETRIEVAL_K = 16
"""Examples quoted per retrieval-augmented row at most."""


class Options(spec.Options):
    retrieval_k: int = Field(0, ge=0, le=MAX_RETRIEVAL_K)
    """examples quoted per retrieval-augmented row: each Q/A pair trained once more under its k nearest pairs,
    as the endpoint quotes retrieved examples (rag_k); one more, longer, row per pair"""
    retrieval_own: float = Field(0.5, ge=0.0, le=1.0)
    """with retrieval_k: the share of the pairs whose retrieval-augmented row quotes their own pair among the k (drawn
    with the seed); the others quote only pairs with another answer. 0.5 (RAFT's mix) teaches to answer with or
    without the answer quoted; 1.0, the routed recipe's, to take it from the block, as a routed adapter is served"""
    retrieval_rewrites: int = Field(0, ge=0, le=rewrites.MAX_REWRITES)
    """with retrieval_k: rewrites of each question (request templates, seeded) trained as more rows, each under
    the k pairs nearest to the rewrite (its own pair among them when retrieval finds it); one more row per
    rewrite and pair"""
    retrieval_multi_turn: int = Field(0, ge=0, le=10_000)
    """with retrieval_k: conversations chaining 4 of the document's Q/A pairs (dealt as multi_turn_rows are), each
    under the k pairs nearest to its last question, its own among them, as the endpoint quotes a dialogue's learned
    task; the loss on every assistant turn; this many a cycle"""
    fresh_rows: int = Field(0, ge=0, le=10_000)
    """with retrieval_k: rows of tasks never trained, each a pair whose command's words are replaced by new ones
    (in its question too), asked in other words under a block quoting it first and the k - 1 pairs nearest, the
    loss on the new command: they teach the adapter to answer a task logged since its cycle from its quoted
    example; this many a cycle"""


ROUTED_OWN = 1.0
"""``retrieval_own`` of the recipe for a daemon that quotes retrieved examples (:func:`served`): every retrieval row
quotes its own pair. The endpoint routes to the adapter only a request near a question it learned
(:mod:`learnerd.ml.router`), whose logged example retrieval finds, so the served adapter always has its answer
quoted; a row without it trains for a request that goes to the base. On the 20-pair screening document (34 of its
tasks asked in other words, as served) 1.0 answered 24 where 0.5 answered 19 (docs/benchmarks.md, "Every row
quotes its own pair")."""


def served(rag_k: int) -> dict[str, Any]:
    """The recipe's keys for a daemon whose endpoint quotes ``rag_k`` retrieved examples in every request
    (``[serve] rag_k``; 0: off): train under as many (at most :data:`MAX_RETRIEVAL_K`), each pair's own among them
    (:data:`ROUTED_OWN`)."""
    return {"retrieval_k": min(rag_k, MAX_RETRIEVAL_K), "retrieval_own": ROUTED_OWN} if rag_k > 0 else {}


FRESH_PREFIX = "fresh:"
"""The section id prefix of a fresh task's row (``fresh:<n>:<the pair's section id>``)."""
RETRIEVAL_PREFIX = "retrieval:"
"""The section id prefix of a retrieval-augmented row (``retrieval:<the pair's section id>``)."""
REWRITE_PREFIX = "rewrite:"
"""The section id prefix of a rewrite's row (``rewrite:<n>:<the pair's section id>``)."""
QUOTED_MULTI_TURN_PREFIX = "quoted-multi-turn:"
"""The section id prefix of a quoted multi-turn row (``quoted-multi-turn:<n>``)."""


def _hits(
    similarity: np.ndarray, questions: Sequence[str], answers: Sequence[str], k: int, skip: str | None = None
) -> list[dict[str, Any]]:
    """The ``k`` pairs of ``similarity`` (one row of cosine similarities to every pair), best first, each answer
    once (whitespace folded, as ``learnerd.store.retrieval.describe_hits`` serves them), ``skip`` (a folded
    answer) left out."""
    seen = {skip} if skip is not None else set()
    hits: list[dict[str, Any]] = []
    for j in np.argsort(-similarity, kind="stable"):
        folded = " ".join(answers[j].split())
        if folded not in seen:
            seen.add(folded)
            hits.append({"query": questions[j], "answer": answers[j], "language": ""})
        if len(hits) == k:
            break
    return hits


def _single_turn(rows: Sequence[TrainingRow]) -> list[tuple[str, tuple[ChatMessage, ...]]]:
    return [
        (r.section_id, r.messages) for r in rows if r.messages and sum(m.role == "assistant" for m in r.messages) == 1
    ]


def _questions_answers(pairs: Sequence[tuple[str, tuple[ChatMessage, ...]]]) -> tuple[list[str], list[str]]:
    """The user question and the assistant answer of each of :func:`_single_turn`'s ``pairs``, in order."""
    questions = [next(m.content for m in messages if m.role == "user") for _, messages in pairs]
    answers = [next(m.content for m in messages if m.role == "assistant") for _, messages in pairs]
    return questions, answers


def retrieval_rows(
    rows: Sequence[TrainingRow],
    k: int,
    embed: Callable[[Sequence[str]], np.ndarray],
    *,
    seed: int,
    own: float = 0.5,
) -> list[TrainingRow]:
    """One retrieval-augmented row per single-turn Q/A pair of ``rows``: the pair's own messages, with ``k``
    pairs of ``rows`` quoted in its system message as the endpoint quotes retrieved examples
    (``with_examples``; the fences carry no language tag: a pair has none), the loss on its answer as before.

    The quoted pairs are those whose questions are nearest to the pair's question (cosine similarity of
    ``embed``'s vectors, best first, each answer once, as ``learnerd.store.retrieval.describe_hits`` serves
    them). ``ceil(own * n)`` of the pairs (drawn by ``random.Random(seed)``; half by default) quote their own pair
    among them, as retrieval does for a prompt learnerd has already learned; the others quote only pairs with
    another answer, as for a prompt it has not — so with half each the adapter learns neither to ignore the block nor
    to copy it, and with all of them to take a quoted answer (``retrieval_own``).

    Args:
        rows: training rows; chat rows with exactly one assistant message are the pairs, the rest are ignored.
        k: examples per block (the endpoint's ``rag_k``); 0 gives no rows.
        embed: texts → float32 ``(n, d)`` unit rows (:meth:`learnerd.ml.embedders.MiniLMEmbedder.embed`).
        seed: the seed of the draw.
        own: the share of the pairs that quote their own pair, 0.0 to 1.0.

    Returns:
        the rows, in the pairs' order; empty when ``k`` is 0 or ``rows`` hold fewer than two pairs.
    """
    pairs = _single_turn(rows)
    if k <= 0 or len(pairs) < 2:
        return []
    questions, answers = _questions_answers(pairs)
    vectors = np.asarray(embed(questions), dtype=np.float32)
    similarity = vectors @ vectors.T
    in_store = set(random.Random(seed).sample(range(len(pairs)), math.ceil(own * len(pairs))))
    out = []
    for i, (section_id, messages) in enumerate(pairs):
        skip = None if i in in_store else " ".join(answers[i].split())
        hits = _hits(similarity[i], questions, answers, k, skip)
        prompt = with_examples([m for m in messages if m.role != "assistant"], hits)
        answer_turn = [m for m in messages if m.role == "assistant"]
        out.append(TrainingRow(section_id=f"{RETRIEVAL_PREFIX}{section_id}", messages=(*prompt, *answer_turn)))
    return out


def quoted_multi_turn_rows(
    rows: Sequence[TrainingRow], k: int, count: int, embed: Callable[[Sequence[str]], np.ndarray], *, seed: int
) -> list[TrainingRow]:
    """``count`` multi-turn rows of ``rows``' pairs (:func:`learnerd.training.ingredients.multi_turn.multi_turn_rows`,
    dealt with ``seed``), each with the ``k`` pairs nearest to its last question quoted in its system message
    (``with_examples``), its own pair first among them: the dialogue as the endpoint serves its last turn, which
    quotes the examples retrieved for the last user message, a learned task's own example first. The loss covers
    every assistant turn, as a multi-turn row's.

    Returns:
        the rows; empty when ``k`` or ``count`` is 0 or ``rows`` hold fewer than two pairs.
    """
    pairs = _single_turn(rows)
    if k <= 0 or count <= 0 or len(pairs) < 2:
        return []
    questions, answers = _questions_answers(pairs)
    vectors = np.asarray(embed(questions), dtype=np.float32)
    index = {q: i for i, q in enumerate(questions)}
    out = []
    for n, row in enumerate(multi_turn.multi_turn_rows(rows, count, seed=seed)):
        messages = list(row.messages or ())
        last = index[next(m.content for m in reversed(messages) if m.role == "user")]
        messages = with_examples(messages, _hits(vectors[last] @ vectors.T, questions, answers, k))
        out.append(TrainingRow(section_id=f"{QUOTED_MULTI_TURN_PREFIX}{n}", messages=tuple(messages)))
    return out


def rewrite_rows(
    rows: Sequence[TrainingRow], k: int, count: int, embed: Callable[[Sequence[str]], np.ndarray], *, seed: int
) -> list[TrainingRow]:
    """``count`` rows per single-turn Q/A pair of ``rows``, each the pair asked in other words
    (:func:`learnerd.training.rewrites.rewrite_question`, seeded with ``seed`` and the pair's section id) under the
    ``k`` pairs whose questions are nearest to the rewrite (cosine similarity of ``embed``'s vectors; the pair's own
    among them when it is near enough, as retrieval finds a logged task asked anew), the loss on the pair's answer.

    Returns:
        the rows, rewrite by rewrite in the pairs' order; empty when ``k`` or ``count`` is 0 or ``rows`` hold fewer
        than two pairs.
    """
    pairs = _single_turn(rows)
    if k <= 0 or count <= 0 or len(pairs) < 2:
        return []
    questions, answers = _questions_answers(pairs)
    asked = [
        rewrites.rewrite_question(q, count, seed=f"{seed}:{sid}") for q, (sid, _) in zip(questions, pairs, strict=True)
    ]
    vectors = np.asarray(embed(questions), dtype=np.float32)
    flat = [text for texts in asked for text in texts]
    rewritten = np.asarray(embed(flat), dtype=np.float32) if flat else np.zeros((0, vectors.shape[1]), np.float32)
    out, at = [], 0
    for (section_id, messages), texts in zip(pairs, asked, strict=True):
        for n, text in enumerate(texts):
            hits = _hits(rewritten[at] @ vectors.T, questions, answers, k)
            at += 1
            turns = [ChatMessage("user", text) if m.role == "user" else m for m in messages if m.role != "assistant"]
            answer_turn = [m for m in messages if m.role == "assistant"]
            prompt = with_examples(turns, hits)
            out.append(TrainingRow(section_id=f"{REWRITE_PREFIX}{n}:{section_id}", messages=(*prompt, *answer_turn)))
    return out


def fresh_rows(
    rows: Sequence[TrainingRow], k: int, count: int, embed: Callable[[Sequence[str]], np.ndarray], *, seed: int
) -> list[TrainingRow]:
    """``count`` rows of tasks the adapter never trained (the module docstring): the single-turn Q/A pairs of
    ``rows`` whose command has a word to replace, in an order drawn with ``random.Random(seed)`` and taken again
    from the start when ``count`` exceeds them, each made a new task (:func:`learnerd.training.new_tasks.new_task`,
    a new draw each time, from the words of all the pairs' commands, never one of their commands), its question
    rewritten (:func:`learnerd.training.rewrites.rewrite_question`; the new question itself when no rewrite differs)
    under a block quoting the new pair first and the ``k - 1`` pairs of ``rows`` nearest to the new question (cosine
    similarity of ``embed``'s vectors), the loss on the new command.

    Returns:
        the rows (section ids ``fresh:<n>:<pair>``); empty when ``k`` or ``count`` is 0, ``rows`` hold fewer than
        two pairs, or no command has a word to replace.
    """
    pairs = _single_turn(rows)
    if k <= 0 or count <= 0 or len(pairs) < 2:
        return []
    questions, answers = _questions_answers(pairs)
    words = [new_tasks.command_words(answer) for answer in answers]
    candidates = [i for i, replaceable in enumerate(words) if replaceable]
    if not candidates:
        return []
    vocabulary = sorted({word for replaceable in words for word in replaceable})
    known = set(answers)
    rng = random.Random(f"{seed}:fresh")
    rng.shuffle(candidates)
    made = []
    for n in range(count):
        i = candidates[n % len(candidates)]
        question, answer = _new_pair(questions[i], answers[i], rng, vocabulary, known)
        rewritten = rewrites.rewrite_question(question, 1, seed=f"{seed}:fresh:{n}") or [question]
        made.append((i, question, answer, rewritten[0]))
    vectors = np.asarray(embed(questions), dtype=np.float32)
    new_vectors = np.asarray(embed([question for _, question, _, _ in made]), dtype=np.float32)
    out = []
    for n, ((i, question, answer, asked), vector) in enumerate(zip(made, new_vectors, strict=True)):
        oracle = {"query": question, "answer": answer, "language": ""}
        hits = [oracle, *_hits(vector @ vectors.T, questions, answers, k - 1)] if k > 1 else [oracle]
        section_id, messages = pairs[i]
        turns = [ChatMessage("user", asked) if m.role == "user" else m for m in messages if m.role != "assistant"]
        prompt = with_examples(turns, hits)
        out.append(
            TrainingRow(
                section_id=f"{FRESH_PREFIX}{n}:{section_id}", messages=(*prompt, ChatMessage("assistant", answer))
            )
        )
    return out


def _new_pair(
    question: str, answer: str, rng: random.Random, vocabulary: Sequence[str], known: set[str]
) -> tuple[str, str]:
    """:func:`learnerd.training.new_tasks.new_task` of a pair whose command has a word to replace, drawn again (up to
    8 times, then with new shapes only) while its command is one of the ``known`` answers: a new task's is new."""
    variant = None
    for words in (*([vocabulary] * 8), ()):
        variant = new_tasks.new_task(question, answer, rng, words)
        if variant is not None and variant[1] not in known:
            break
    assert variant is not None  # the pair's command has a word to replace
    return variant


def rows(options: Options, cycle: spec.CycleRows) -> spec.Rows:
    """One row per pair of the cycle and ``retrieval_rewrites`` more, neighbours among all its pairs (the MiniLM
    embedder, loaded here; each text embedded once, :func:`learnerd.ml.router.embed_memo`): every epoch for a
    trained pair, with the rehearsal for a rehearsed one (so a rehearsed pair costs an epoch what a new one does);
    and ``fresh_rows`` rows of new tasks, every epoch."""
    if not options.retrieval_k:
        return spec.Rows([])
    from learnerd.ml.embedders import MiniLMEmbedder
    from learnerd.ml.router import embed_memo

    embedder = MiniLMEmbedder()

    def embed(texts: Sequence[str]) -> np.ndarray:  # the pairs' questions once for the three kinds of rows
        return embed_memo(embedder, texts)

    rehearsed = {r.section_id for r in cycle.rehearsal}
    augmented = retrieval_rows(cycle.pairs, options.retrieval_k, embed, seed=cycle.seed, own=options.retrieval_own)
    augmented += rewrite_rows(cycle.pairs, options.retrieval_k, options.retrieval_rewrites, embed, seed=cycle.seed)
    fresh = fresh_rows(cycle.pairs, options.retrieval_k, options.fresh_rows, embed, seed=cycle.seed)
    dialogues = quoted_multi_turn_rows(
        cycle.pairs, options.retrieval_k, options.retrieval_multi_turn, embed, seed=cycle.seed + 1
    )  # another deal than the multi-turn rows' (seed)
    return spec.Rows(
        [*(r for r in augmented if _pair_of(r) not in rehearsed), *fresh, *dialogues],
        [r for r in augmented if _pair_of(r) in rehearsed],
    )


def _pair_of(row: TrainingRow) -> str:
    """The section id of the pair a retrieval-augmented or rewrite row trains."""
    if row.section_id.startswith(REWRITE_PREFIX):
        return row.section_id.removeprefix(REWRITE_PREFIX).split(":", 1)[1]
    return row.section_id.removeprefix(RETRIEVAL_PREFIX)


INGREDIENT = spec.Ingredient("retrieval", Options, rows=rows)
