"""PostgreSQL advisory lock keys: one signed 64-bit ``bigint`` per (space, key), the lock space PostgreSQL's
``pg_advisory_lock`` family takes. Spaces keep unrelated locks apart: the fleet's per-queue reconcile
locks use the queue's name, adapter commits ``"adapters"``, block merges ``"blocks"``, foyle trace halves
``"foyle_traces"`` (:func:`lock_for_merge`)."""

from __future__ import annotations

import hashlib
from typing import Any


def advisory_lock_id(space: str, key: str) -> int:
    """The signed 64-bit advisory lock key of ``key`` in ``space``: the first 8 bytes of BLAKE2b of
    ``space NUL key``, big-endian."""
    return int.from_bytes(hashlib.blake2b(f"{space}\0{key}".encode(), digest_size=8).digest(), "big", signed=True)


def lock_for_merge(conn: Any, space: str, key: str) -> None:
    """Before a read-merge-write of the row ``key`` in a transaction on ``conn``: on PostgreSQL, wait for
    and hold (until the transaction ends) the advisory lock of ``(space, key)``, so replicas merging into the
    same row at once take turns instead of one overwriting what the other wrote (a lost update under READ
    COMMITTED; a row lock cannot cover a row that does not exist yet). On SQLite nothing: ``BEGIN IMMEDIATE``
    already serialises writers.
    """
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        conn.execute("SELECT pg_advisory_xact_lock(?)", (advisory_lock_id(space, key),))
