"""Retrieval-augmented rows: each Q/A pair trained once more under a block of its nearest pairs, quoted as the
OpenAI-compatible endpoint quotes retrieved examples (:func:`learnerd.ml.retrieved_examples.with_examples`,
``[serve] rag_k``), so the adapter learns to answer with that block in front of it — from the examples when one
answers the question, from what it learned when none does (docs/retention.md, "Retrieval-augmented rows")."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import TrainingRow
from learnerd.training.ingredients import spec

MAX_RETRIEVAL_K = 16
"""Examples quoted per retrieval-augmented row at most."""


class Options(spec.Options):
    retrieval_k: int = Field(0, ge=0, le=MAX_RETRIEVAL_K)
    """examples quoted per retrieval-augmented row: each Q/A pair trained once more under its k nearest pairs,
    as the endpoint quotes retrieved examples (rag_k); one more, longer, row per pair"""


def served(rag_k: int) -> dict[str, Any]:
    """The recipe's keys for a daemon whose endpoint quotes ``rag_k`` retrieved examples in every request
    (``[serve] rag_k``; 0: off): train under as many (at most :data:`MAX_RETRIEVAL_K`)."""
    return {"retrieval_k": min(rag_k, MAX_RETRIEVAL_K)} if rag_k > 0 else {}


RETRIEVAL_PREFIX = "retrieval:"
"""The section id prefix of a retrieval-augmented row (``retrieval:<the pair's section id>``)."""


def retrieval_rows(
    rows: Sequence[TrainingRow], k: int, embed: Callable[[Sequence[str]], np.ndarray], *, seed: int
) -> list[TrainingRow]:
    """One retrieval-augmented row per single-turn Q/A pair of ``rows``: the pair's own messages, with ``k``
    pairs of ``rows`` quoted in its system message as the endpoint quotes retrieved examples
    (``with_examples``; the fences carry no language tag: a pair has none), the loss on its answer as before.

    The quoted pairs are those whose questions are nearest to the pair's question (cosine similarity of
    ``embed``'s vectors, best first, each answer once, as ``learnerd.store.retrieval.describe_hits`` serves
    them). Half of the pairs (``ceil(n / 2)``, drawn by ``random.Random(seed)``) quote their own pair among
    them, as retrieval does for a prompt learnerd has already learned; the others quote only pairs with another
    answer, as for a prompt it has not — so the adapter learns neither to ignore the block nor to copy it.

    Args:
        rows: training rows; chat rows with exactly one assistant message are the pairs, the rest are ignored.
        k: examples per block (the endpoint's ``rag_k``); 0 gives no rows.
        embed: texts → float32 ``(n, d)`` unit rows (:meth:`learnerd.ml.embedders.MiniLMEmbedder.embed`).
        seed: the seed of the draw.

    Returns:
        the rows, in the pairs' order; empty when ``k`` is 0 or ``rows`` hold fewer than two pairs.
    """
    pairs = [
        (r.section_id, r.messages) for r in rows if r.messages and sum(m.role == "assistant" for m in r.messages) == 1
    ]
    if k <= 0 or len(pairs) < 2:
        return []
    questions = [next(m.content for m in messages if m.role == "user") for _, messages in pairs]
    answers = [next(m.content for m in messages if m.role == "assistant") for _, messages in pairs]
    folded = [" ".join(answer.split()) for answer in answers]  # whitespace folded, as describe_hits compares
    vectors = np.asarray(embed(questions), dtype=np.float32)
    similarity = vectors @ vectors.T
    in_store = set(random.Random(seed).sample(range(len(pairs)), (len(pairs) + 1) // 2))
    out = []
    for i, (section_id, messages) in enumerate(pairs):
        seen = set() if i in in_store else {folded[i]}
        hits: list[dict[str, Any]] = []
        for j in np.argsort(-similarity[i], kind="stable"):
            if folded[j] not in seen:
                seen.add(folded[j])
                hits.append({"query": questions[j], "answer": answers[j], "language": ""})
            if len(hits) == k:
                break
        prompt = with_examples([m for m in messages if m.role != "assistant"], hits)
        answer_turn = [m for m in messages if m.role == "assistant"]
        out.append(TrainingRow(section_id=f"{RETRIEVAL_PREFIX}{section_id}", messages=(*prompt, *answer_turn)))
    return out


def rows(options: Options, cycle: spec.CycleRows) -> spec.Rows:
    """One row per pair of the cycle, neighbours among all its pairs (the MiniLM embedder, loaded here): every
    epoch for a trained pair, with the rehearsal for a rehearsed one (so a rehearsed pair costs an epoch what a
    new one does)."""
    if not options.retrieval_k:
        return spec.Rows([])
    from learnerd.ml.embedders import MiniLMEmbedder

    rehearsed = {f"{RETRIEVAL_PREFIX}{r.section_id}" for r in cycle.rehearsal}
    augmented = retrieval_rows(cycle.pairs, options.retrieval_k, MiniLMEmbedder().embed, seed=cycle.seed)
    return spec.Rows(
        [r for r in augmented if r.section_id not in rehearsed], [r for r in augmented if r.section_id in rehearsed]
    )


INGREDIENT = spec.Ingredient("retrieval", Options, rows=rows)
