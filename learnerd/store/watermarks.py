"""Watermarks: how far the analyzer has read each log file (foyle TN005's ``LogsWaterMark``, per file).

A watermark says "every line of the file at ``path`` before byte ``offset`` has been ingested";
``line`` is how many lines that is (so log messages can name line numbers). ``inode`` identifies the
file the offset belongs to: when the path later names another inode the file was rotated or replaced.
``fingerprint`` is the sha256 (hex) of the file's first ``fingerprint_len`` bytes (at most
:data:`FINGERPRINT_BYTES`, never past ``offset``): a file deleted and recreated may get the same inode
number back, and the fingerprint is how that is told apart from the same file grown (the technique
Vector's file source calls checksum fingerprinting).

Watermarks are keyed by (host, path): ``host`` names the replica's host in a fleet sharing one
PostgreSQL database (``[fleet] host``), so two hosts can tail files with the same path; a single
process on SQLite uses ``""``.

The analyzer writes a watermark in the same transaction as the block rows produced by the lines it
covers, so it can never pass a line whose block is not committed.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass

from learnerd.store.db import Migration

FINGERPRINT_BYTES = 1024

MIGRATIONS = (
    Migration(
        "watermarks",
        1,
        """
        CREATE TABLE watermarks (
            path       TEXT PRIMARY KEY,
            inode      INTEGER NOT NULL,
            "offset"   INTEGER NOT NULL,
            line       INTEGER NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
    ),
    # 2: a watermark also remembers a fingerprint of the file's first bytes (sha256 hex of the first
    # fingerprint_len bytes), so a file replaced by another that reuses its inode is not resumed mid-way.
    Migration(
        "watermarks",
        2,
        """
        ALTER TABLE watermarks ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
        ALTER TABLE watermarks ADD COLUMN fingerprint_len INTEGER NOT NULL DEFAULT 0
        """,
    ),
    # 3: keyed by (replica host, path), so two hosts of a fleet can tail files with the same path.
    Migration(
        "watermarks",
        3,
        """
        CREATE TABLE watermarks_v4 (
            host            TEXT NOT NULL DEFAULT '',
            path            TEXT NOT NULL,
            inode           INTEGER NOT NULL,
            "offset"        INTEGER NOT NULL,
            line            INTEGER NOT NULL,
            updated_at      REAL NOT NULL,
            fingerprint     TEXT NOT NULL DEFAULT '',
            fingerprint_len INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (host, path)
        );
        INSERT INTO watermarks_v4 (host, path, inode, "offset", line, updated_at, fingerprint, fingerprint_len)
            SELECT '', path, inode, "offset", line, updated_at, fingerprint, fingerprint_len FROM watermarks;
        DROP TABLE watermarks;
        ALTER TABLE watermarks_v4 RENAME TO watermarks
        """,
    ),
)


@dataclass(frozen=True)
class Watermark:
    """One file's read position. ``offset`` and ``fingerprint_len`` in bytes, ``line`` a count of lines."""

    path: str
    inode: int
    offset: int
    line: int
    fingerprint: str = ""
    fingerprint_len: int = 0


def fingerprint_of(head: bytes) -> str:
    """The fingerprint of a file whose first bytes are ``head`` (sha256, hex)."""
    return hashlib.sha256(head).hexdigest()


def load_watermarks(conn: sqlite3.Connection, host: str = "") -> list[Watermark]:
    """Every stored watermark of ``host``, ordered by path."""
    rows = conn.execute(
        'SELECT path, inode, "offset", line, fingerprint, fingerprint_len FROM watermarks WHERE host = ? ORDER BY path',
        (host,),
    ).fetchall()
    return [Watermark(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


def put_watermark(conn: sqlite3.Connection, wm: Watermark, now: float, host: str = "") -> None:
    """Insert or replace ``host``'s watermark of ``wm.path``; ``now`` (epoch seconds) becomes ``updated_at``."""
    conn.execute(
        'INSERT OR REPLACE INTO watermarks (host, path, inode, "offset", line, fingerprint, fingerprint_len,'
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (host, wm.path, wm.inode, wm.offset, wm.line, wm.fingerprint, wm.fingerprint_len, now),
    )


def delete_watermark(conn: sqlite3.Connection, path: str, host: str = "") -> None:
    """Forget ``host``'s watermark of ``path`` (no error when there is none)."""
    conn.execute("DELETE FROM watermarks WHERE host = ? AND path = ?", (host, path))


def watermark_hosts(conn: sqlite3.Connection) -> list[str]:
    """The hosts that have watermarks (``""`` for a single process), in order."""
    return [r[0] for r in conn.execute("SELECT DISTINCT host FROM watermarks ORDER BY host")]
