"""Which replica owns a key: rendezvous (highest-random-weight) hashing over the live replicas.

Thaler & Ravishankar, "A name-based mapping scheme for rendezvous", 1996: each key goes to the replica
whose ``hash(replica id, key)`` is the largest. Every replica computes the same owner from the same
list of live replicas, with no coordination; when a replica joins or leaves only the keys it gains or
held move (1/N of them), the others stay where they are. The hash is BLAKE2b (64 bits), so the spread
is uniform whatever the keys look like.

Ownership spreads the work; exclusivity comes from a per-key advisory lock taken around each reconcile
(:meth:`learnerd.fleet.fleet.Fleet.try_lock`), so two replicas whose views of the live set briefly differ
still never reconcile one key at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from learnerd.store.locks import advisory_lock_id


def _weight(replica: str, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{replica}\0{key}".encode(), digest_size=8).digest(), "big")


def owner(key: str, replicas: Sequence[str]) -> str | None:
    """The replica id among ``replicas`` that owns ``key``, or None when ``replicas`` is empty."""
    return max(replicas, key=lambda r: (_weight(r, key), r), default=None)


def lock_id(queue: str, key: str) -> int:
    """The signed 64-bit advisory lock key of ``key`` on ``queue`` (PostgreSQL's ``bigint`` lock space)."""
    return advisory_lock_id(queue, key)
