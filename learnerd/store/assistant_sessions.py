"""Assistants' sessions: what the analyzer remembers of a Claude Code, Codex CLI or OpenTelemetry GenAI
session between its records, and the rejected attempts of learned blocks.

A session's records arrive one by one (the person's turn, the assistant's plan, its command, the command's
result, each on its own line), possibly in different batches or across a restart. The readers keep here,
in the same transaction as the watermark of the record they came from, what a later record needs:

- ``intent``: the person's last turn (the intent of every command until the next turn), ``plan``: what the
  assistant said it would do since that turn, ``intent_time`` (epoch seconds) when the turn was written;
- ``cwd``: the session's working directory (atuin rows join a session by it, :mod:`learnerd.analyzer.atuin`);
- ``failed``: the ids of the blocks whose command failed since the last one that succeeded (a JSON array);
- ``session_id``: the assistant's own id of the session, where it is not the key (Codex names a session in
  the first record of its file only: the key is then the file).

``rejected_attempts`` pairs a block with each failed command it corrected (same session, the failure
first): the negatives a later training may use.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from learnerd.store.db import Migration
from learnerd.store.locks import lock_for_merge

MIGRATIONS = (
    Migration(
        "assistant_sessions",
        1,
        """
        CREATE TABLE assistant_sessions (
            source      TEXT NOT NULL,
            session_key TEXT NOT NULL,
            session_id  TEXT NOT NULL DEFAULT '',
            intent      TEXT NOT NULL DEFAULT '',
            plan        TEXT NOT NULL DEFAULT '',
            intent_time REAL,
            cwd         TEXT NOT NULL DEFAULT '',
            failed      TEXT NOT NULL DEFAULT '[]',
            updated_at  REAL NOT NULL,
            PRIMARY KEY (source, session_key)
        );
        CREATE INDEX assistant_sessions_cwd ON assistant_sessions(cwd, intent_time);
        CREATE TABLE rejected_attempts (
            block_id   TEXT NOT NULL,
            attempt_id TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (block_id, attempt_id)
        )
        """,
    ),
)


@dataclass
class Session:
    """One assistant session's state (see the module docstring); ``failed`` holds block ids, oldest first."""

    source: str
    session_key: str
    session_id: str = ""
    intent: str = ""
    plan: str = ""
    intent_time: float | None = None
    cwd: str = ""
    failed: list[str] = field(default_factory=list)


def get_session(conn: sqlite3.Connection, source: str, session_key: str) -> Session:
    """The stored state of a session, or an empty one (not stored) when none is; locks it for a merge."""
    lock_for_merge(conn, "assistant_sessions", f"{source}\0{session_key}")
    row = conn.execute(
        "SELECT session_id, intent, plan, intent_time, cwd, failed FROM assistant_sessions"
        " WHERE source = ? AND session_key = ?",
        (source, session_key),
    ).fetchone()
    if row is None:
        return Session(source, session_key)
    return Session(source, session_key, row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))


def put_session(conn: sqlite3.Connection, session: Session, now: float) -> None:
    """Insert or replace a session's state; ``now`` (epoch seconds) becomes ``updated_at``."""
    conn.execute(
        "INSERT OR REPLACE INTO assistant_sessions"
        " (source, session_key, session_id, intent, plan, intent_time, cwd, failed, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session.source,
            session.session_key,
            session.session_id,
            session.intent,
            session.plan,
            session.intent_time,
            session.cwd,
            json.dumps(session.failed),
            now,
        ),
    )


def session_near(conn: sqlite3.Connection, cwd: str, when: float, window_s: float) -> Session | None:
    """The session with working directory ``cwd`` whose person spoke last at most ``window_s`` seconds
    before ``when`` (epoch seconds) and not after it; None when there is none."""
    row = conn.execute(
        "SELECT source, session_key FROM assistant_sessions WHERE cwd = ? AND intent <> ''"
        " AND intent_time <= ? AND intent_time >= ? ORDER BY intent_time DESC LIMIT 1",
        (cwd, when, when - window_s),
    ).fetchone()
    return get_session(conn, row[0], row[1]) if row is not None else None


def add_rejected_attempts(conn: sqlite3.Connection, block_id: str, attempt_ids: Sequence[str], now: float) -> int:
    """Record that ``block_id`` corrected the failed blocks ``attempt_ids``; ``now`` (epoch seconds) becomes
    ``updated_at``. Returns how many pairs are new (a replay adds none, so counting the returns counts each
    rejected attempt once)."""
    added = 0
    for attempt_id in attempt_ids:
        if attempt_id != block_id:
            known = conn.execute(
                "SELECT 1 FROM rejected_attempts WHERE block_id = ? AND attempt_id = ?", (block_id, attempt_id)
            ).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO rejected_attempts (block_id, attempt_id, updated_at) VALUES (?, ?, ?)",
                (block_id, attempt_id, now),
            )
            added += known is None
    return added


def rejected_attempts_of(conn: sqlite3.Connection, block_id: str) -> list[str]:
    """The failed blocks ``block_id`` corrected, by id."""
    rows = conn.execute("SELECT attempt_id FROM rejected_attempts WHERE block_id = ? ORDER BY attempt_id", (block_id,))
    return [r[0] for r in rows]


def count_rejected_attempts(conn: sqlite3.Connection) -> int:
    """How many (block, rejected attempt) pairs are stored."""
    return conn.execute("SELECT count(*) FROM rejected_attempts").fetchone()[0]
