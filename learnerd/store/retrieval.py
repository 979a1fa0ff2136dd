"""Few-shot retrieval: the top-k learned examples for a text (foyle TN006's read path).

Two halves, because they run in different threads in the daemon: :func:`nearest` embeds the text
and searches the :class:`~learnerd.store.vector_index.VectorIndex` (CPU-bound; a worker thread),
:func:`describe_hits` looks the examples up in SQLite (the connection's own thread, the event loop).
``learnerd search`` offline calls both in a row.

Two examples may hold one answer (two pages teach the same command): a result lists each answer once, at
its best score, so :func:`nearest` fetches :data:`OVERFETCH` times ``k`` candidates and
:func:`describe_hits` keeps the first ``k`` distinct answers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Protocol, TypedDict

import numpy as np

from learnerd.store.examples import get_examples
from learnerd.store.vector_index import VectorIndex

OVERFETCH = 4
"""Candidates fetched per wanted hit, so duplicate answers can be dropped and ``k`` hits still remain."""


class TextEmbedder(Protocol):
    """What retrieval needs of an embedder (:class:`learnerd.ml.embedders.Embedder` is one): ``embed(texts)``
    → float32 array of shape ``(len(texts), dim)``, unit rows."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class SearchHit(TypedDict):
    """One result: ``score`` is the cosine similarity of the text with the example's query, in [-1, 1]."""

    id: str
    query: str
    answer: str
    language: str
    score: float


def nearest(embedder: TextEmbedder, index: VectorIndex, text: str, k: int) -> list[tuple[str, float]]:
    """Embed ``text`` and return the ``OVERFETCH × k`` (example id, cosine similarity) pairs nearest to it,
    best first (candidates for :func:`describe_hits`, which keeps ``k``).

    Blocking (the embedder's forward pass and the faiss search); fewer pairs when the index holds fewer
    vectors.
    """
    return nearest_to(index, embedder.embed([text])[0], k)


def nearest_to(index: VectorIndex, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
    """:func:`nearest` of a text already embedded as ``vector`` (float32 ``(dim,)``). Blocking (faiss)."""
    return index.search(vector, k * OVERFETCH)


def describe_hits(conn: sqlite3.Connection, hits: list[tuple[str, float]], k: int) -> list[SearchHit]:
    """The first ``k`` examples of ``hits`` (best first) with their scores (rounded to 4 digits), each
    answer once: an example whose answer (whitespace folded) an earlier hit already gave is left out, as
    are ids with no stored example (deleted since they were indexed)."""
    examples = get_examples(conn, [i for i, _ in hits])
    seen: set[str] = set()
    described: list[SearchHit] = []
    for i, score in hits:
        example = examples.get(i)
        answer = " ".join(example.answer.split()) if example is not None else ""
        if example is None or answer in seen:
            continue
        seen.add(answer)
        described.append(
            SearchHit(
                id=i, query=example.query, answer=example.answer, language=example.language, score=round(score, 4)
            )
        )
        if len(described) == k:
            break
    return described
