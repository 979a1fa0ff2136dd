"""The base model's log-likelihoods and next-token distributions, item by item, kept in the model cache between
evaluations.

The base never changes while its adapter does, and most of what an evaluation scores on the base is scored
again at the next one: ``calibration_drift``'s 200 gold completions every time, and ``section_internalization``'s
and ``paraphrase_invariance``'s items for every section the document still has (a cycle adds sections; it
rarely rewrites them). At the bench's full size (100 sections) ``section_internalization`` was 442 of an
evaluation's 761 s. A :class:`BaseLogprobStore` keeps each item's value, so a later evaluation on the base
computes only the items it has not seen and the adapter's side: on SmolLM2 with 20 sections, 4 of them new,
the next evaluation took 148.4 s where it took 179.0 s with only the base's answers kept
(``benchmarks/bench_eval_cache.py``, docs/benchmarks.md).

The base's next-token distributions are kept the same way: ``delta_kl``'s after the document's and sway's
sentinel prompts, and ``multi_turn_coherence_decay``'s before each later turn of its dialogues (whose histories
hold the adapter's own earlier answers: the same again once a version answers as the last did).

One SQLite database a base: ``<directory>/base-logprobs-<sha256[:16]>.sqlite``, the hash of
``[CACHE_VERSION, base identity, device, dtype]``; a table ``logprobs(item BLOB PRIMARY KEY, nats REAL)``,
``item`` the SHA-256 (32 bytes) of the item's ``[context ids, target ids]`` as compact JSON and ``nats`` its
log-likelihood (:meth:`learnerd.eval.backend.View.logprob`, float64); a table
``dists(item BLOB PRIMARY KEY, ids BLOB, logprobs BLOB, vocab INTEGER)``, ``item`` the SHA-256 of
``["dist", prompt ids, top_k]`` (:func:`dist_key`), ``ids`` the top-k token ids (int64, little-endian) and
``logprobs`` their log-probabilities (float64, nats) of :meth:`learnerd.eval.backend.View.next_token_dists`.
Written in one transaction per call, so a crash leaves every row whole. A cache never fails an evaluation: a
database that cannot be read (damaged, not SQLite) is logged as ``base_logprobs.unreadable``, removed and built
again; one that cannot be written (no space, a read-only model cache, another process holding the lock past the
timeout) is logged as ``base_logprobs.unwritable`` and skipped. Deleting the file is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from learnerd.ml.divergence import TokenDist

log = structlog.get_logger(__name__)

CACHE_VERSION = 1
LOCK_TIMEOUT_S = 5.0
"""Seconds a read or write waits for another process's lock on the database before giving up (a miss)."""
_LOOKUP_CHUNK = 500  # items per SELECT: under SQLite's default limit of 999 bound parameters

Item = tuple[Sequence[int], Sequence[int]]
"""A scored item: ``(context, target)`` token ids."""


def item_key(item: Item) -> bytes:
    """The SHA-256 digest (32 bytes) naming ``item`` in the store."""
    ids = [[int(t) for t in item[0]], [int(t) for t in item[1]]]  # numpy or torch integers name the same item
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).digest()


def dist_key(prompt: Sequence[int], top_k: int) -> bytes:
    """The SHA-256 digest (32 bytes) naming the ``top_k`` next-token distribution after ``prompt`` in the store."""
    raw = ["dist", [int(t) for t in prompt], int(top_k)]
    return hashlib.sha256(json.dumps(raw, separators=(",", ":")).encode()).digest()


@dataclass(frozen=True)
class BaseLogprobStore:
    """Where the base ``base_identity``'s log-likelihoods on ``placement`` (device, dtype) are kept:
    ``directory`` (the model cache, created on the first write, mode 0700)."""

    directory: Path
    base_identity: str
    placement: tuple[str, str]

    @property
    def path(self) -> Path:
        """The database of this base on this device and dtype."""
        raw = [CACHE_VERSION, self.base_identity, *self.placement]
        digest = hashlib.sha256(json.dumps(raw, separators=(",", ":")).encode()).hexdigest()
        return self.directory / f"base-logprobs-{digest[:16]}.sqlite"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S)
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS logprobs (item BLOB PRIMARY KEY, nats REAL NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS dists "
                "(item BLOB PRIMARY KEY, ids BLOB NOT NULL, logprobs BLOB NOT NULL, vocab INTEGER NOT NULL)"
            )
            yield conn
        finally:
            conn.close()

    def load(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        """The stored values (nats) of those of ``keys`` (:func:`item_key`) the store has; the others are
        missing from the result. A database that cannot be read is logged, removed and read as empty."""
        rows = self._select("SELECT item, nats FROM logprobs", keys)
        return {bytes(item): float(nats) for item, nats in rows}

    def load_dists(self, keys: Sequence[bytes]) -> dict[bytes, TokenDist]:
        """The stored distributions of those of ``keys`` (:func:`dist_key`) the store has, as :meth:`load`."""
        rows = self._select("SELECT item, ids, logprobs, vocab FROM dists", keys)
        return {
            bytes(item): TokenDist(np.frombuffer(ids, "<i8").copy(), np.frombuffer(lps, "<f8").copy(), int(vocab))
            for item, ids, lps, vocab in rows
        }

    def save(self, values: dict[bytes, float]) -> None:
        """Keep ``values`` (:func:`item_key` → nats), in one transaction. A store that cannot be written is
        logged as ``base_logprobs.unwritable`` and skipped: the evaluation goes on without it."""
        self._insert("INSERT OR REPLACE INTO logprobs (item, nats) VALUES (?, ?)", list(values.items()))

    def save_dists(self, values: dict[bytes, TokenDist]) -> None:
        """Keep ``values`` (:func:`dist_key` → distribution), as :meth:`save`."""
        rows = [
            (key, d.token_ids.astype("<i8").tobytes(), d.logprobs.astype("<f8").tobytes(), int(d.vocab_size))
            for key, d in values.items()
        ]
        self._insert("INSERT OR REPLACE INTO dists (item, ids, logprobs, vocab) VALUES (?, ?, ?, ?)", rows)

    def _select(self, query: str, keys: Sequence[bytes]) -> list[tuple[Any, ...]]:
        if not keys or not self.path.is_file():
            return []
        found: list[tuple[Any, ...]] = []
        try:
            with self._connect() as conn:
                for start in range(0, len(keys), _LOOKUP_CHUNK):
                    chunk = list(keys[start : start + _LOOKUP_CHUNK])
                    marks = ",".join("?" * len(chunk))
                    found += conn.execute(f"{query} WHERE item IN ({marks})", chunk).fetchall()
        except sqlite3.OperationalError as exc:  # locked past the timeout, unreadable directory: a miss
            log.warning("base_logprobs.unreadable", path=str(self.path), error=str(exc))
            return []
        except sqlite3.DatabaseError as exc:  # damaged or not a database: built again
            log.warning("base_logprobs.unreadable", path=str(self.path), error=str(exc), removed=True)
            self.path.unlink(missing_ok=True)
            return []
        return found

    def _insert(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._connect() as conn, conn:
                conn.executemany(statement, rows)
        except (OSError, sqlite3.Error) as exc:
            log.warning("base_logprobs.unwritable", path=str(self.path), error=str(exc))
