"""The fleet's tables (docs/fleet.md), read and written by :mod:`learnerd.fleet`, a layer above the store:
``replicas`` (heartbeat leases: :mod:`learnerd.fleet.membership`), ``reconcile_log`` (which replica reconciled
which key when, under ``[fleet] audit``: :mod:`learnerd.fleet.fleet`) and ``adapter_commits`` (each adapter
version committed to the shared ``adapters_dir``, and its promotion: :mod:`learnerd.fleet.ledger`). One schema
for both backends: a SQLite store has them too, empty.
"""

from __future__ import annotations

from learnerd.store.db import Migration

MIGRATIONS = (
    Migration(
        "fleet",
        1,
        """
        CREATE TABLE replicas (
            id      TEXT PRIMARY KEY,
            host    TEXT NOT NULL,
            pid     INTEGER NOT NULL,
            started REAL NOT NULL,
            renewed REAL NOT NULL,
            roles   TEXT NOT NULL
        );
        CREATE TABLE reconcile_log (
            queue    TEXT NOT NULL,
            key      TEXT NOT NULL,
            replica  TEXT NOT NULL,
            started  REAL NOT NULL,
            finished REAL NOT NULL
        );
        CREATE INDEX reconcile_log_key ON reconcile_log(queue, key);
        CREATE TABLE adapter_commits (
            document     TEXT NOT NULL,
            version      INTEGER NOT NULL,
            replica      TEXT NOT NULL,
            committed_at REAL NOT NULL,
            PRIMARY KEY (document, version)
        )
        """,
    ),
    # 2: an adapter version is committed as a candidate and promoted by the promotion gate
    # (docs/evaluation.md); a row's promoted_at marks it promoted, the newest promoted row is current. Rows
    # committed before were current when committed: they count as promoted.
    Migration(
        "fleet",
        2,
        """
        ALTER TABLE adapter_commits ADD COLUMN promoted_at REAL;
        UPDATE adapter_commits SET promoted_at = committed_at
        """,
    ),
)
