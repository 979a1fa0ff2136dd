"""Few-shot retrieval: the top-k learned examples for a text (foyle TN006's read path).

Two halves, because they run in different threads in the daemon: :func:`nearest` embeds the text
and searches the :class:`~learnerd.store.vector_index.VectorIndex` (CPU-bound; a worker thread),
:func:`describe_hits` looks the examples up in SQLite (the connection's own thread, the event loop).
``learnerd search`` offline calls both in a row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Protocol, TypedDict

import numpy as np

from learnerd.store.examples import get_examples
from learnerd.store.vector_index import VectorIndex


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
    """Embed ``text`` and return the ``k`` (example id, cosine similarity) pairs nearest to it, best first.

    Blocking (the embedder's forward pass and the faiss search); fewer than ``k`` pairs when the
    index holds fewer vectors.
    """
    return index.search(embedder.embed([text])[0], k)


def describe_hits(conn: sqlite3.Connection, hits: list[tuple[str, float]]) -> list[SearchHit]:
    """The examples of ``hits`` with their scores (rounded to 4 digits), in the same order; ids with
    no stored example (deleted since they were indexed) are left out."""
    examples = get_examples(conn, [i for i, _ in hits])
    return [
        SearchHit(
            id=i,
            query=examples[i].query,
            answer=examples[i].answer,
            language=examples[i].language,
            score=round(score, 4),
        )
        for i, score in hits
        if i in examples
    ]
