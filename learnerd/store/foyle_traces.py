"""Partial foyle traces: the half of a trace whose other half has not been read yet.

A foyle trace (all log lines sharing a ``traceId``) has a request half and a response half written
on different lines, possibly read in different batches or across a restart. The analyzer keeps the
half it has seen here, in the same transaction as the watermark of the line it came from, joins it
when the other half arrives and deletes the row once the trace is consumed. ``request`` and
``response`` hold the raw JSON log line of each half.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from learnerd.store.db import Migration

MIGRATIONS = (
    Migration(
        "foyle_traces",
        1,
        """
        CREATE TABLE foyle_traces (
            trace_id   TEXT PRIMARY KEY,
            kind       TEXT NOT NULL,
            request    TEXT,
            response   TEXT,
            eval_mode  INTEGER NOT NULL DEFAULT 0,
            first_time REAL,
            updated_at REAL NOT NULL
        )
        """,
    ),
)


@dataclass(frozen=True)
class PartialTrace:
    """A trace seen in part. ``kind`` is ``"generate"`` or ``"execute"``; times in epoch seconds."""

    trace_id: str
    kind: str
    request: str | None
    response: str | None
    eval_mode: bool
    first_time: float | None


def get_partial_trace(conn: sqlite3.Connection, trace_id: str) -> PartialTrace | None:
    """The stored half of ``trace_id``, or None."""
    row = conn.execute(
        "SELECT trace_id, kind, request, response, eval_mode, first_time FROM foyle_traces WHERE trace_id = ?",
        (trace_id,),
    ).fetchone()
    if row is None:
        return None
    return PartialTrace(row[0], row[1], row[2], row[3], bool(row[4]), row[5])


def put_partial_trace(conn: sqlite3.Connection, trace: PartialTrace, now: float) -> None:
    """Insert or replace ``trace``; ``now`` (epoch seconds) becomes ``updated_at``."""
    conn.execute(
        "INSERT OR REPLACE INTO foyle_traces (trace_id, kind, request, response, eval_mode, first_time, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (trace.trace_id, trace.kind, trace.request, trace.response, int(trace.eval_mode), trace.first_time, now),
    )


def delete_partial_trace(conn: sqlite3.Connection, trace_id: str) -> None:
    conn.execute("DELETE FROM foyle_traces WHERE trace_id = ?", (trace_id,))


def count_partial_traces(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM foyle_traces").fetchone()[0]
