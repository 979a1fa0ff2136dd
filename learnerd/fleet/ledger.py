"""Adapter commits recorded in PostgreSQL: the :class:`~learnerd.store.adapters.CommitLedger` of a fleet.

On a PostgreSQL store the ``adapter_commits (document, version, replica, committed_at)`` row is the commit
of an adapter version (docs/fleet.md, "Adapters"): :meth:`AdapterLedger.transaction` opens a transaction
and takes ``pg_advisory_xact_lock`` on the document (:func:`~learnerd.fleet.ownership.lock_id` of
``("adapters", doc_key)``), so commits of one document are serialised across every replica and the next
version number (highest row + 1) is never given twice; the adapter store renames the staged directory
into place and records the row inside it, and PostgreSQL's COMMIT makes the version visible to every
reader at once — as a candidate. Its promotion (the promotion gate passed, docs/evaluation.md) sets the
row's ``promoted_at`` in another such transaction, and the newest promoted row is the document's current
version. The lock is released with the transaction, and at once if the session dies. The promoting
transaction NOTIFYs the document key (:data:`~learnerd.fleet.notify.ADAPTERS`), delivered only if it
commits, so the other replicas' OpenAI endpoints serve the promoted version at once.

Each ledger has two connections of its own, opened at first use: one for reads (serving, the evaluation
reconciler, ``learnerd eval``), one for commit transactions, each used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from learnerd.fleet import membership, notify
from learnerd.fleet.ownership import lock_id
from learnerd.store import db
from learnerd.store.adapters import AdapterStore
from learnerd.store.pg import PgConnection

if TYPE_CHECKING:
    from pathlib import Path

    from learnerd.fleet.settings import FleetConfig
    from learnerd.store.layout import StateLayout

LOCK_QUEUE = "adapters"
"""The advisory lock space of adapter commits (distinct from the training queue's reconcile locks)."""


@dataclass
class _Transaction:
    conn: PgConnection
    doc_key: str
    replica: str
    versions: frozenset[int] = field(default_factory=frozenset)
    current: int | None = None

    def record(self, number: int) -> None:
        self.conn.execute(
            "INSERT INTO adapter_commits (document, version, replica, committed_at)"
            f" VALUES (?, ?, ?, {membership.NOW})",
            (self.doc_key, number, self.replica),
        )

    def promote(self, number: int) -> None:
        self.conn.execute(
            f"UPDATE adapter_commits SET promoted_at = {membership.NOW} WHERE document = ? AND version = ?",
            (self.doc_key, number),
        )
        for payload in notify.payloads(self.replica, notify.ADAPTERS, [self.doc_key]):  # delivered at COMMIT
            self.conn.execute("SELECT pg_notify(?, ?)", (notify.CHANNEL, payload))


class AdapterLedger:
    """The ``adapter_commits`` table of the database ``url`` (its schema migrated); ``replica`` is written
    in each row it records (the committing replica's id)."""

    def __init__(self, url: str, replica: str) -> None:
        self.url = url
        self.replica = replica
        # Reads and commit transactions on separate connections: a commit holds its connection through the
        # fsync and rename of a whole adapter, and a read (a request to the OpenAI endpoint) must not wait.
        self._conns: dict[str, PgConnection] = {}
        self._mutexes = {"read": threading.Lock(), "commit": threading.Lock()}

    @contextlib.contextmanager
    def _connection(self, use: str, *, wait: bool = True) -> Iterator[PgConnection | None]:
        """The ``use`` connection ("read" or "commit"), opened at first use, for this thread alone; None
        when ``wait`` is False and another thread has it."""
        mutex = self._mutexes[use]
        if not mutex.acquire(blocking=wait):
            yield None
            return
        try:
            if use not in self._conns:
                self._conns[use] = db.connect(self.url)
            yield self._conns[use]
        finally:
            mutex.release()

    def versions(self, doc_key: str) -> frozenset[int]:
        """The committed version numbers of ``doc_key``.

        Raises:
            StoreUnavailable, SchemaError: (:mod:`learnerd.store.db`) at the first use, the database is
                unreachable or its schema is not this learnerd's.
            psycopg.Error: the database failed later.
        """
        with self._connection("read") as conn:
            assert conn is not None  # waited for it
            rows = conn.execute("SELECT version FROM adapter_commits WHERE document = ?", (doc_key,)).fetchall()
        return frozenset(r[0] for r in rows)

    def current(self, doc_key: str) -> int | None:
        """The newest promoted version number of ``doc_key`` (None: none promoted).

        Raises:
            StoreUnavailable, SchemaError, psycopg.Error: as :meth:`versions`.
        """
        with self._connection("read") as conn:
            assert conn is not None  # waited for it
            return _newest_promoted(conn, doc_key)

    @contextlib.contextmanager
    def transaction(self, doc_key: str, *, wait: bool = True) -> Iterator[_Transaction | None]:
        """A transaction holding ``doc_key``'s commit lock, with its committed versions read under it;
        None when ``wait`` is False and another session (or thread) holds it. Commits when the block
        exits, rolls back when it raises.

        Raises:
            psycopg.Error: the database is unreachable, or the COMMIT failed (nothing was recorded).
        """
        with self._connection("commit", wait=wait) as conn:
            if conn is None:
                yield None
                return
            with conn.transaction():
                lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
                row = conn.execute(f"SELECT {lock}(?)", (lock_id(LOCK_QUEUE, doc_key),)).fetchone()
                if row is None or row[0] is False:
                    yield None
                    return
                rows = conn.execute("SELECT version FROM adapter_commits WHERE document = ?", (doc_key,)).fetchall()
                versions = frozenset(r[0] for r in rows)
                yield _Transaction(conn, doc_key, self.replica, versions, _newest_promoted(conn, doc_key))

    def close(self) -> None:
        """Close the connections (reopened at the next use)."""
        for use, mutex in self._mutexes.items():
            with mutex:
                conn = self._conns.pop(use, None)
                if conn is not None:
                    conn.close()


def _newest_promoted(conn: PgConnection, doc_key: str) -> int | None:
    row = conn.execute(
        "SELECT max(version) FROM adapter_commits WHERE document = ? AND promoted_at IS NOT NULL", (doc_key,)
    ).fetchone()
    return row[0] if row is not None else None


class ReplicaConfig(Protocol):
    """What :func:`adapter_store` reads of the configuration (the daemon's :class:`~learnerd.daemon.config.Config`)."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def layout(self) -> StateLayout: ...
    @property
    def fleet(self) -> FleetConfig: ...


def adapter_store(cfg: ReplicaConfig) -> AdapterStore:
    """The adapter store of ``cfg`` (the daemon's :class:`~learnerd.daemon.config.Config`): on PostgreSQL with an
    :class:`AdapterLedger` (recording this replica's id with its commits), else the plain one (SQLite)."""
    layout = cfg.layout
    if not layout.is_postgres:
        return AdapterStore(layout.adapters_dir)
    replica = membership.replica_id(cfg.fleet.host or socket.gethostname(), cfg.state_dir)
    return AdapterStore(layout.adapters_dir, AdapterLedger(layout.store_url, replica))
