"""The in-memory vector index (foyle TN006's InMemoryDB) behind few-shot retrieval.

A float32 matrix of shape ``(capacity, dim)`` whose first ``len(index)`` rows are live, and an
``id → row`` map plus its inverse. Upsert of a known id overwrites its row; a new id takes the next
row, doubling the capacity when full (amortised O(1)); delete moves the last live row into the hole
so live rows stay contiguous. Top-k is an exact inner-product search with faiss (``faiss.knn``) over
the live rows; with unit vectors that is cosine similarity. One ``threading.Lock`` guards all state,
so searches may run in worker threads while the event loop upserts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import faiss
import numpy as np


class VectorIndex:
    """Exact top-k inner-product index over unit vectors, keyed by example id."""

    def __init__(self, dim: int | None = None, initial_capacity: int = 1024) -> None:
        """``dim`` is the vector size; None fixes it at the first upsert (an OpenAI-compatible
        endpoint's size is only known from its first response)."""
        if dim is not None and dim <= 0:
            raise ValueError(f"dim must be positive, not {dim}")
        self.dim = dim
        self._initial_capacity = max(1, initial_capacity)
        self._matrix = np.zeros((self._initial_capacity, dim or 0), dtype=np.float32)
        self._row_of: dict[str, int] = {}
        self._ids: list[str] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, example_id: object) -> bool:
        return example_id in self._row_of

    def ids(self) -> list[str]:
        """The ids held, in row order (a copy)."""
        with self._lock:
            return list(self._ids)

    @property
    def capacity(self) -> int:
        return self._matrix.shape[0]

    def _check(self, vectors: np.ndarray, n: int) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim == 2 and self.dim is None and n > 0:
            self.dim = vectors.shape[1]
            self._matrix = np.zeros((self._initial_capacity, self.dim), dtype=np.float32)
        if vectors.shape != (n, self.dim):
            raise ValueError(f"expected vectors of shape ({n}, {self.dim}), got {vectors.shape}")
        return vectors

    def upsert(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Insert or overwrite: ``vectors`` is float32 ``(len(ids), dim)``, row i for ``ids[i]``.

        Raises:
            ValueError: wrong shape.
        """
        vectors = self._check(vectors, len(ids))
        with self._lock:
            for example_id, vector in zip(ids, vectors, strict=True):
                row = self._row_of.get(example_id)
                if row is None:
                    row = len(self._ids)
                    if row == self._matrix.shape[0]:
                        grown = np.zeros((2 * row, self._matrix.shape[1]), dtype=np.float32)
                        grown[:row] = self._matrix
                        self._matrix = grown
                    self._row_of[example_id] = row
                    self._ids.append(example_id)
                self._matrix[row] = vector

    def delete(self, ids: Sequence[str]) -> int:
        """Remove ``ids`` (unknown ids are ignored); return how many were removed."""
        removed = 0
        with self._lock:
            for example_id in ids:
                row = self._row_of.pop(example_id, None)
                if row is None:
                    continue
                last = len(self._ids) - 1
                if row != last:
                    moved = self._ids[last]
                    self._matrix[row] = self._matrix[last]
                    self._ids[row] = moved
                    self._row_of[moved] = row
                self._ids.pop()
                removed += 1
        return removed

    def get(self, example_id: str) -> np.ndarray | None:
        """A copy of the stored vector of ``example_id`` (float32 ``(dim,)``), or None."""
        with self._lock:
            row = self._row_of.get(example_id)
            return None if row is None else self._matrix[row].copy()

    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` ids with the largest inner product with ``query`` (float32 ``(dim,)``), best first.

        Returns fewer than ``k`` pairs when the index holds fewer vectors; scores are inner products
        (cosine similarities for unit vectors).
        """
        if self.dim is None:
            return []
        query = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1), 1)
        with self._lock:
            n = len(self._ids)
            k = min(k, n)
            if k <= 0:
                return []
            scores, rows = faiss.knn(query, self._matrix[:n], k, metric=faiss.METRIC_INNER_PRODUCT)
            return [(self._ids[r], float(s)) for r, s in zip(rows[0], scores[0], strict=True) if r >= 0]
