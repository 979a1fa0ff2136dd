"""Reading another program's SQLite database as a log: its rows in rowid order, read-only
(the :data:`~learnerd.analyzer.reader.SQLITE_ROWS` framing; atuin's ``history.db``).

The database is opened read-only (``mode=ro``: learnerd never writes, creates or migrates it) for one
batch at a time and closed again, so the writer can go on writing, checkpointing its WAL or vacuuming
in between. A database the writer holds locked (``database is locked``), or one that is not (yet) a
database of the expected table, raises :class:`SourceUnreadable`: an ``OSError``, so the analyzer logs
it once, counts it and retries later, as for an unreadable log file — never the store's own failure. A
file that is no SQLite database, or has no such table (another program's ``.db``, learnerd's own store
under a log directory), raises :class:`NotASource`: the analyzer skips it as not a log.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from typing import Any

from learnerd.analyzer.reader import ROWID

BUSY_TIMEOUT_S = 0.1
"""How long a read waits for a writer's lock before the batch is left for the next pass."""
SQLITE_HEADER = b"SQLite format 3\x00"
WAL_SUFFIX = "-wal"
"""A SQLite database's write-ahead log is ``<database>-wal``: a write in WAL mode changes it, not the database
file, so a change to it is a change to its database (the analyzer's watch maps one to the other)."""


class SourceUnreadable(OSError):
    """A SQLite log cannot be read now (locked, or another I/O failure); retried later."""


class NotASource(SourceUnreadable):
    """The file is not a SQLite database, or has no such table: another program's file, not a log."""


def _open(path: str) -> sqlite3.Connection:
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


def read_rows(path: str, table: str, after_rowid: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Up to ``limit`` rows of ``table`` with a rowid above ``after_rowid``, in rowid order (each a dict of its
    columns, the rowid under :data:`~learnerd.analyzer.reader.ROWID`), and the table's largest rowid now
    (0 when empty), read in one read transaction.

    Raises:
        NotASource: the file is not a SQLite database, or has no ``table``.
        SourceUnreadable: the database is locked, or cannot be read.
    """
    try:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_HEADER)) not in (SQLITE_HEADER, b""):
                raise NotASource(f"{path}: not a SQLite database")
        conn = _open(path)
        try:
            conn.execute("BEGIN")
            if (
                conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
                is None
            ):
                raise NotASource(f"{path}: no table {table!r}")
            top = conn.execute(f'SELECT coalesce(max(rowid), 0) FROM "{table}"').fetchone()[0]
            rows = conn.execute(
                f'SELECT rowid AS "{ROWID}", * FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT ?',
                (after_rowid, limit),
            ).fetchall()
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SourceUnreadable(f"{path}: {exc}") from exc
    return [dict(row) for row in rows], top
