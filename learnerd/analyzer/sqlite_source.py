"""Reading another program's SQLite database as a log: its rows in rowid order, read-only
(the :data:`~learnerd.analyzer.reader.SQLITE_ROWS` framing; atuin's ``history.db``).

The database is opened read-only (``mode=ro``: learnerd never writes, creates or migrates it) for one
batch at a time and closed again, so the writer can go on writing, checkpointing its WAL or vacuuming
in between. A database the writer holds locked (``database is locked``), or one that is not (yet) a
database of the expected table, raises :class:`SourceUnreadable`: an ``OSError``, so the analyzer logs
it once, counts it and retries later, as for an unreadable log file — never the store's own failure. A
file that is no SQLite database, or has no such table (another program's ``.db``, learnerd's own store
under a log directory), raises :class:`NotASource`: the analyzer skips it as not a log.

**Bounded reads.** Another program's database is input like a log line, and a hostile one can make a read
cost anything: a ``SELECT *`` evaluates every column, a virtual generated column included
(``pad BLOB GENERATED ALWAYS AS (zeroblob(400000000)) VIRTUAL`` makes each row 400 MB). So a read selects
only the named columns its readers use (:attr:`~learnerd.analyzer.reader.Reader.columns`), and only those
that are ordinary columns of the table (a generated or hidden column is never read: it reads as missing);
SQLite itself refuses to make any value longer than ``max_value_bytes`` (``SQLITE_LIMIT_LENGTH`` on the
read connection); a row whose values add up to more than ``max_value_bytes``, or holding one value SQLite
refused, comes back as an *oversized* row (its rowid and :data:`OVERSIZED` only: counted and skipped, as an
oversized line is); and a batch stops once its rows hold ``max_batch_bytes`` (one row at least). One read
holds at most one batch plus one row in memory, whatever the file.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from typing import Any

from learnerd.analyzer.reader import ROWID

BUSY_TIMEOUT_S = 0.1
"""How long a read waits for a writer's lock before the batch is left for the next pass."""
SQLITE_HEADER = b"SQLite format 3\x00"
OVERSIZED = "_oversized"
"""The key of an oversized row's record: its size in bytes (-1 when SQLite refused to make one of its values)."""
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


def read_rows(
    path: str,
    table: str,
    after_rowid: int,
    limit: int,
    *,
    columns: tuple[str, ...],
    max_value_bytes: int,
    max_batch_bytes: int,
) -> tuple[list[dict[str, Any]], int]:
    """Up to ``limit`` rows of ``table`` with a rowid above ``after_rowid``, in rowid order, and the table's
    largest rowid now (0 when empty), read in one read transaction, bounded as the module docstring says.

    Each row is a dict of those of ``columns`` that are ordinary columns of the table (values of at most
    ``max_value_bytes`` bytes in all), the rowid under :data:`~learnerd.analyzer.reader.ROWID`; an oversized
    row is ``{ROWID: rowid, OVERSIZED: bytes}``. The rows stop early once they hold ``max_batch_bytes``.

    Raises:
        NotASource: the file is not a SQLite database, or has no ``table``.
        SourceUnreadable: the database is locked, or cannot be read.
    """
    try:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_HEADER)) not in (SQLITE_HEADER, b""):
                raise NotASource(f"{path}: not a SQLite database")
        conn = _open(path)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(max_value_bytes, 1))
        try:
            conn.execute("BEGIN")
            if (
                conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
                is None
            ):
                raise NotASource(f"{path}: no table {table!r}")
            top = conn.execute(f'SELECT coalesce(max(rowid), 0) FROM "{table}"').fetchone()[0]
            present = _ordinary_columns(conn, table)
            selected = [c for c in dict.fromkeys(columns) if c in present]
            rows = _bounded_rows(conn, table, selected, after_rowid, limit, max_value_bytes, max_batch_bytes)
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SourceUnreadable(f"{path}: {exc}") from exc
    return rows, top


def _ordinary_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The names of ``table``'s ordinary columns: ``PRAGMA table_xinfo``'s ``hidden`` is 0 (1: a virtual
    table's hidden column, 2 and 3: a generated column, virtual or stored)."""
    return {row["name"] for row in conn.execute(f'PRAGMA table_xinfo("{table}")') if row["hidden"] == 0}


def _bounded_rows(
    conn: sqlite3.Connection,
    table: str,
    columns: list[str],
    after_rowid: int,
    limit: int,
    max_value_bytes: int,
    max_batch_bytes: int,
) -> list[dict[str, Any]]:
    """The rows after ``after_rowid``, each read alone by its rowid (so a value SQLite refuses to make names its
    row), until ``limit`` rows or ``max_batch_bytes`` (see :func:`read_rows`)."""
    rowids = [
        r[0]
        for r in conn.execute(
            f'SELECT rowid FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT ?', (after_rowid, limit)
        )
    ]
    names = "".join(f', "{c}"' for c in columns)
    select = f'SELECT rowid AS "{ROWID}"{names} FROM "{table}" WHERE rowid = ?'
    rows: list[dict[str, Any]] = []
    held = 0
    for rowid in rowids:
        if held >= max_batch_bytes:
            break
        try:
            row = conn.execute(select, (rowid,)).fetchone()
        except sqlite3.DataError:  # a value over SQLITE_LIMIT_LENGTH: SQLite refused to make it
            rows.append({ROWID: rowid, OVERSIZED: -1})
            continue
        if row is None:
            continue
        record = dict(row)
        size = sum(_size(v) for v in record.values())
        if size > max_value_bytes:
            record, size = {ROWID: rowid, OVERSIZED: size}, 0
        rows.append(record)
        held += size
    return rows


def _size(value: Any) -> int:
    """The bytes a column value holds (text as UTF-8; a number counts 8)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes):
        return len(value)
    return 8
