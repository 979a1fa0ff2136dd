"""Tombstones: what ``learnerd forget`` took back, so nothing learns it again.

One row per forget: ``kind`` is what was named (``example``, ``block``, ``source``, ``match``), ``value`` the
id, log file or text, ``block_ids`` (a JSON list) the blocks it covered when it was written. A tombstone
**covers** a block when the block's id is among its ``block_ids``, or — for ``match`` — when ``value`` occurs
(case-sensitive substring) in the block's would-be example, query or answer, so a block logged later with
the same text is refused too. The examples reconciler refuses every covered block
(:mod:`learnerd.reconcilers.examples`), and since the table lives in the store (SQLite, or the fleet's
PostgreSQL), re-ingestion, a backfill and every replica see it.

A tombstone's id is ``sha256(kind + "\\n" + value)[:16]`` hex: forgetting the same thing twice writes one
row (the second forget adds the blocks the first did not cover).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from learnerd.store.db import Migration

KINDS = ("example", "block", "source", "match")
"""What a tombstone may name (``learnerd forget --example/--block/--source/--match``)."""

MIGRATIONS = (
    Migration(
        "tombstones",
        1,
        """
        CREATE TABLE tombstones (
            id         TEXT PRIMARY KEY,
            kind       TEXT NOT NULL,
            value      TEXT NOT NULL,
            block_ids  TEXT NOT NULL DEFAULT '[]',
            created_at REAL NOT NULL
        )
        """,
    ),
)


@dataclass(frozen=True)
class Tombstone:
    """One forget: ``kind`` (one of :data:`KINDS`), ``value``, the ``block_ids`` it covered when written, and
    ``created_at`` (seconds since the epoch)."""

    kind: str
    value: str
    block_ids: tuple[str, ...] = ()
    created_at: float = 0.0

    @property
    def id(self) -> str:
        """``sha256(kind + "\\n" + value)[:16]`` hex."""
        return tombstone_id(self.kind, self.value)

    def covers(self, block_id: str, texts: Iterable[str] = ()) -> bool:
        """Whether this tombstone refuses the block ``block_id`` whose example would hold ``texts``."""
        if block_id in self.block_ids:
            return True
        return self.kind == "match" and any(self.value in t for t in texts)

    def to_json(self) -> dict[str, object]:
        """``{"id", "kind", "value", "block_ids", "created_at"}``."""
        return {
            "id": self.id,
            "kind": self.kind,
            "value": self.value,
            "block_ids": list(self.block_ids),
            "created_at": self.created_at,
        }


def tombstone_id(kind: str, value: str) -> str:
    """The id of the tombstone of ``kind`` and ``value`` (see the module docstring)."""
    return hashlib.sha256(f"{kind}\n{value}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Tombstones:
    """Every tombstone of the store, read at once (:func:`load_tombstones`)."""

    all: tuple[Tombstone, ...] = ()

    def covering(self, block_id: str, texts: Iterable[str] = ()) -> Tombstone | None:
        """The first tombstone that covers the block (see :meth:`Tombstone.covers`), or None."""
        texts = tuple(texts)
        return next((t for t in self.all if t.covers(block_id, texts)), None)


def load_tombstones(conn: sqlite3.Connection) -> Tombstones:
    """Every tombstone, oldest first."""
    rows = conn.execute("SELECT kind, value, block_ids, created_at FROM tombstones ORDER BY created_at, id")
    stones = tuple(Tombstone(r[0], r[1], tuple(json.loads(r[2])), r[3]) for r in rows)
    return Tombstones(stones)


def put_tombstone(conn: sqlite3.Connection, stone: Tombstone) -> Tombstone:
    """Write ``stone`` (inside the caller's transaction); an existing tombstone of the same kind and value keeps
    its ``created_at`` and gains ``stone``'s block ids. Returns the tombstone as stored.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`, or ``value`` is empty.
    """
    if stone.kind not in KINDS:
        raise ValueError(f"a tombstone's kind is one of {', '.join(KINDS)}, not {stone.kind!r}")
    if not stone.value:
        raise ValueError("a tombstone needs a value")
    row = conn.execute("SELECT block_ids, created_at FROM tombstones WHERE id = ?", (stone.id,)).fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO tombstones (id, kind, value, block_ids, created_at) VALUES (?, ?, ?, ?, ?)",
            (stone.id, stone.kind, stone.value, json.dumps(sorted(set(stone.block_ids))), stone.created_at),
        )
        return Tombstone(stone.kind, stone.value, tuple(sorted(set(stone.block_ids))), stone.created_at)
    ids = tuple(sorted(set(json.loads(row[0])) | set(stone.block_ids)))
    conn.execute("UPDATE tombstones SET block_ids = ? WHERE id = ?", (json.dumps(list(ids)), stone.id))
    return Tombstone(stone.kind, stone.value, ids, row[1])


def delete_tombstone(conn: sqlite3.Connection, stone_id: str) -> Tombstone | None:
    """Delete the tombstone ``stone_id`` (inside the caller's transaction); the deleted one, or None."""
    stone = next((t for t in load_tombstones(conn).all if t.id == stone_id), None)
    if stone is not None:
        conn.execute("DELETE FROM tombstones WHERE id = ?", (stone_id,))
    return stone
