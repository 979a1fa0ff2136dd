"""Embedding rows: one float32 vector per example, with the model name, dimension and a hash of the
embedded text, so a vector is recomputed only when the text or the model changes.

``vector`` is stored as a BLOB of ``dim`` little-endian float32 values (``dim * 4`` bytes).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from learnerd.store.db import Migration
from learnerd.store.vector_index import VectorIndex

MIGRATIONS = (
    Migration(
        "embeddings",
        1,
        """
        CREATE TABLE embeddings (
            example_id TEXT PRIMARY KEY,
            model      TEXT NOT NULL,
            dim        INTEGER NOT NULL,
            text_hash  TEXT NOT NULL,
            vector     BLOB NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
    ),
)

_F32 = np.dtype("<f4")


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text that was embedded."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class EmbeddingMeta:
    """What decides whether a stored vector is still current."""

    model: str
    text_hash: str


def get_metas(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, EmbeddingMeta]:
    """``example_id → (model, text_hash)`` for the stored vectors among ``ids``."""
    found: dict[str, EmbeddingMeta] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT example_id, model, text_hash FROM embeddings WHERE example_id IN ({marks})", chunk
        ):
            found[row[0]] = EmbeddingMeta(row[1], row[2])
    return found


def put_vectors(
    conn: sqlite3.Connection,
    ids: Sequence[str],
    vectors: np.ndarray,
    model: str,
    hashes: Sequence[str],
    now: float,
) -> None:
    """Insert or replace the vectors of ``ids``: ``vectors`` is float32 ``(len(ids), dim)``."""
    vectors = np.asarray(vectors, dtype=_F32)
    dim = vectors.shape[1]
    conn.executemany(
        "INSERT OR REPLACE INTO embeddings (example_id, model, dim, text_hash, vector, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(i, model, dim, h, v.tobytes(), now) for i, v, h in zip(ids, vectors, hashes, strict=True)],
    )


def delete_vectors(conn: sqlite3.Connection, ids: Sequence[str]) -> int:
    """Delete the vectors of ``ids``; return how many rows went."""
    return conn.executemany("DELETE FROM embeddings WHERE example_id = ?", [(i,) for i in ids]).rowcount


def iter_vectors(conn: sqlite3.Connection, model: str, batch: int = 4096) -> Iterator[tuple[list[str], np.ndarray]]:
    """All stored vectors of ``model`` in chunks: ``(ids, float32 (len(ids), dim))``."""
    cursor = conn.execute(
        "SELECT example_id, dim, vector FROM embeddings WHERE model = ? ORDER BY example_id", (model,)
    )
    while rows := cursor.fetchmany(batch):
        dim = rows[0][1]
        ids = [r[0] for r in rows]
        matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=_F32).reshape(len(rows), dim)
        yield ids, matrix


def list_embedding_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT example_id FROM embeddings ORDER BY example_id")]


def count_vectors(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]


def load_index(conn: sqlite3.Connection, model: str, dim: int | None) -> VectorIndex:
    """A :class:`VectorIndex` holding every stored vector of ``model`` (start-up, offline search)."""
    index = VectorIndex(dim, initial_capacity=max(1024, count_vectors(conn)))
    for ids, matrix in iter_vectors(conn, model):
        index.upsert(ids, matrix)
    return index


def get_vector(conn: sqlite3.Connection, example_id: str) -> tuple[EmbeddingMeta, np.ndarray] | None:
    """The stored vector of ``example_id`` (float32, shape ``(dim,)``) with its meta, or None."""
    row = conn.execute("SELECT model, text_hash, vector FROM embeddings WHERE example_id = ?", (example_id,)).fetchone()
    if row is None:
        return None
    return EmbeddingMeta(row[0], row[1]), np.frombuffer(row[2], dtype=_F32).copy()
