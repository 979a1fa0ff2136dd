"""Adapter commits recorded in PostgreSQL: the :class:`~learnerd.store.adapters.CommitLedger` of a fleet.

On a PostgreSQL store the ``adapter_commits (document, version, replica, committed_at)`` row is the commit
of an adapter version (docs/fleet.md, "Adapters"): :meth:`AdapterLedger.transaction` opens a transaction
and takes ``pg_advisory_xact_lock`` on the document (:func:`~learnerd.fleet.ownership.lock_id` of
``("adapters", doc_key)``), so commits of one document are serialised across every replica and the next
version number (highest row + 1) is never given twice; the adapter store renames the staged directory
into place and records the row inside it, and PostgreSQL's COMMIT makes the version visible to every
reader at once. The lock is released with the transaction, and at once if the session dies. The same
transaction NOTIFYs the document key (:data:`~learnerd.fleet.notify.ADAPTERS`), delivered only if it
commits, so the other replicas' OpenAI endpoints serve the new version at once.

Each ledger has its own connection, opened at first use (a replica's reconcilers, ``learnerd eval`` and
the OpenAI endpoint read through it), used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from learnerd.fleet import membership, notify
from learnerd.fleet.ownership import lock_id
from learnerd.store import db
from learnerd.store.adapters import AdapterStore
from learnerd.store.pg import PgConnection

if TYPE_CHECKING:
    from learnerd.config import Config

LOCK_QUEUE = "adapters"
"""The advisory lock space of adapter commits (distinct from the training queue's reconcile locks)."""


@dataclass
class _Transaction:
    conn: PgConnection
    doc_key: str
    replica: str
    versions: frozenset[int] = field(default_factory=frozenset)

    def record(self, number: int) -> None:
        self.conn.execute(
            "INSERT INTO adapter_commits (document, version, replica, committed_at)"
            f" VALUES (?, ?, ?, {membership.NOW})",
            (self.doc_key, number, self.replica),
        )
        for payload in notify.payloads(self.replica, notify.ADAPTERS, [self.doc_key]):  # delivered at COMMIT
            self.conn.execute("SELECT pg_notify(?, ?)", (notify.CHANNEL, payload))


class AdapterLedger:
    """The ``adapter_commits`` table of the database ``url`` (its schema migrated); ``replica`` is written
    in each row it records (the committing replica's id)."""

    def __init__(self, url: str, replica: str) -> None:
        self.url = url
        self.replica = replica
        self._conn: PgConnection | None = None
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[PgConnection]:
        with self._mutex:
            if self._conn is None:
                self._conn = db.connect(self.url)
            yield self._conn

    def versions(self, doc_key: str) -> frozenset[int]:
        """The committed version numbers of ``doc_key``.

        Raises:
            StoreUnavailable, SchemaError: (:mod:`learnerd.store.db`) at the first use, the database is
                unreachable or its schema is not this learnerd's.
            psycopg.Error: the database failed later.
        """
        with self._connection() as conn:
            rows = conn.execute("SELECT version FROM adapter_commits WHERE document = ?", (doc_key,)).fetchall()
        return frozenset(r[0] for r in rows)

    @contextlib.contextmanager
    def transaction(self, doc_key: str, *, wait: bool = True) -> Iterator[_Transaction | None]:
        """A transaction holding ``doc_key``'s commit lock, with its committed versions read under it;
        None when ``wait`` is False and another session holds the lock. Commits when the block exits,
        rolls back when it raises.

        Raises:
            psycopg.Error: the database is unreachable, or the COMMIT failed (nothing was recorded).
        """
        with self._connection() as conn, conn.transaction():
            lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
            got = conn.execute(f"SELECT {lock}(?)", (lock_id(LOCK_QUEUE, doc_key),)).fetchone()[0]
            if got is False:
                yield None
                return
            rows = conn.execute("SELECT version FROM adapter_commits WHERE document = ?", (doc_key,)).fetchall()
            yield _Transaction(conn, doc_key, self.replica, frozenset(r[0] for r in rows))

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def adapter_store(cfg: Config) -> AdapterStore:
    """The adapter store of ``cfg`` (a :class:`~learnerd.config.Config`): on PostgreSQL with an
    :class:`AdapterLedger` (recording this replica's id with its commits), else the plain one (SQLite)."""
    layout = cfg.layout
    if not layout.is_postgres:
        return AdapterStore(layout.adapters_dir)
    replica = membership.replica_id(cfg.fleet.host or socket.gethostname(), cfg.state_dir)
    return AdapterStore(layout.adapters_dir, AdapterLedger(layout.store_url, replica))
