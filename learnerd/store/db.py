"""The SQLite database: connection settings, schema version and migrations.

One file, WAL mode, ``synchronous=NORMAL``: a committed transaction survives a process crash
(``kill -9``); after a power loss the newest transactions may roll back, but always as a whole, and
since the analyzer commits each batch of blocks together with the watermark that covers them, a
rollback only means those log lines are read again.

The schema version lives in ``PRAGMA user_version``; :data:`MIGRATIONS` holds one SQL script per
version and :func:`connect` applies the missing ones in order, each in its own transaction.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

MIGRATIONS: tuple[str, ...] = (
    # 1: blocks, examples, embeddings, watermarks, partial foyle traces.
    """
    CREATE TABLE blocks (
        id                 TEXT PRIMARY KEY,
        source             TEXT NOT NULL,
        context            TEXT NOT NULL DEFAULT '[]',
        context_time       REAL,
        generated          TEXT,
        generated_language TEXT,
        generated_time     REAL,
        executed           TEXT,
        executed_language  TEXT,
        exit_code          INTEGER,
        eval_mode          INTEGER NOT NULL DEFAULT 0,
        executed_time      REAL,
        suggestion_status  TEXT,
        event_time         REAL,
        created_at         REAL NOT NULL,
        updated_at         REAL NOT NULL
    );
    CREATE INDEX blocks_updated_at ON blocks(updated_at);
    CREATE TABLE examples (
        id         TEXT PRIMARY KEY,
        query      TEXT NOT NULL,
        answer     TEXT NOT NULL,
        language   TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL
    );
    CREATE TABLE embeddings (
        example_id TEXT PRIMARY KEY,
        model      TEXT NOT NULL,
        dim        INTEGER NOT NULL,
        text_hash  TEXT NOT NULL,
        vector     BLOB NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE watermarks (
        path       TEXT PRIMARY KEY,
        inode      INTEGER NOT NULL,
        offset     INTEGER NOT NULL,
        line       INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE foyle_traces (
        trace_id   TEXT PRIMARY KEY,
        kind       TEXT NOT NULL,
        request    TEXT,
        response   TEXT,
        eval_mode  INTEGER NOT NULL DEFAULT 0,
        first_time REAL,
        updated_at REAL NOT NULL
    );
    """,
    # 2: a watermark also remembers a fingerprint of the file's first bytes (sha256 hex of the first
    # fingerprint_len bytes), so a file replaced by another that reuses its inode is not resumed mid-way.
    """
    ALTER TABLE watermarks ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
    ALTER TABLE watermarks ADD COLUMN fingerprint_len INTEGER NOT NULL DEFAULT 0
    """,
    # 3: the generated cell keeps its kind (foyle generates markup blocks as well as code blocks).
    """
    ALTER TABLE blocks ADD COLUMN generated_kind TEXT NOT NULL DEFAULT 'code'
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaError(RuntimeError):
    """The database was written by a newer learnerd (its schema version is above ours)."""


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the database at ``path`` and bring its schema up to date.

    The connection is in autocommit mode (``isolation_level=None``); group writes with
    :func:`transaction`. Rows come back as :class:`sqlite3.Row`.

    Raises:
        SchemaError: the file's schema version is newer than :data:`SCHEMA_VERSION`.
        sqlite3.Error: the file is not a database or cannot be opened.
    """
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        conn.close()
        raise SchemaError(
            f"{path}: schema version {version} is newer than this learnerd's ({SCHEMA_VERSION}); upgrade learnerd"
        )
    if readonly:
        return conn
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with transaction(conn):
            for statement in _split_statements(MIGRATIONS[target - 1]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {target}")
    return conn


def _split_statements(script: str) -> list[str]:
    """Split a migration script into statements (executescript would commit the open transaction)."""
    return [s.strip() for s in script.split(";") if s.strip()]


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` if the block raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
