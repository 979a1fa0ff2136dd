"""The blocks a log file speaks of (``learnerd forget --source FILE``), read by the same readers as the
analyzer (:data:`~learnerd.analyzer.registry.READERS`), so every format it learns from can be forgotten by file.

Each line is decoded and parsed like the analyzer's intake does (:mod:`learnerd.analyzer.ingest`), against a
scratch in-memory SQLite store (a reader may keep half a trace in the store; nothing of the real one is
read or written); a file-scoped format (Codex CLI's rollouts, which name their session only in the first line)
is given the file's path as the analyzer gives it. A SQLite log (atuin's ``history.db``) is read row by row as
the analyzer reads it (:mod:`learnerd.analyzer.sqlite_source`). Lines that are blank, not JSON, foreign or
malformed are counted and skipped.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from learnerd.analyzer import registry
from learnerd.analyzer.reader import EVENTS, JSON_LINES, ROWID, SQLITE_ROWS, Record, framing_of
from learnerd.analyzer.sqlite_source import OVERSIZED, read_rows
from learnerd.store import db

ROWS_PER_READ = 1000
MAX_ROW_BYTES = 4 * 1024 * 1024
"""A SQLite log is read :data:`ROWS_PER_READ` rows at a time, rows over :data:`MAX_ROW_BYTES` skipped (the
analyzer's default ``max_line_bytes``)."""


@dataclass
class FileBlocks:
    """``block_ids``: every block id the file's records name, in order of first mention; ``skipped``: how
    many non-blank lines named none (not JSON, foreign, malformed, a trace half without its other half)."""

    block_ids: list[str] = field(default_factory=list)
    skipped: int = 0


def block_ids_in_file(path: Path) -> FileBlocks:
    """The blocks ``path`` (a log file: JSON lines, or a SQLite log) names (see the module docstring).

    Raises:
        OSError: the file cannot be read (a SQLite log that is locked or has no such table too).
    """
    found: dict[str, None] = {}
    result = FileBlocks()
    scratch = db.connect_sqlite(":memory:")
    try:
        for record in _records(path):
            ids = _record_block_ids(scratch, record, str(path))
            if ids is None:
                result.skipped += 1
            found.update(dict.fromkeys(ids or ()))
    finally:
        scratch.close()
    result.block_ids = list(found)
    return result


def _records(path: Path) -> Iterator[Record | None]:
    """Each record of ``path`` in order: a JSON line's object ({} for a blank line, None for one that is not
    a JSON object), or a SQLite log's row (None for an oversized one)."""
    if framing_of(path.name) is SQLITE_ROWS:
        after = 0
        columns = registry.columns(SQLITE_ROWS)
        while True:
            rows, _ = read_rows(
                str(path),
                SQLITE_ROWS.table,
                after,
                ROWS_PER_READ,
                columns=columns,
                max_value_bytes=MAX_ROW_BYTES,
                max_batch_bytes=MAX_ROW_BYTES,
            )
            if not rows:
                return
            yield from (None if OVERSIZED in row else row for row in rows)
            after = rows[-1][ROWID]
    with path.open("rb") as lines:
        for raw in lines:
            if not raw.strip():
                yield {}
                continue
            try:
                record = json.loads(raw.decode("utf-8-sig"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                record = None
            yield record if isinstance(record, dict) else None


def _record_block_ids(conn: sqlite3.Connection, record: Record | None, path: str) -> list[str] | None:
    """The block ids one record names; [] for a blank line; None for a record that names none."""
    if record == {}:
        return []
    framing = SQLITE_ROWS if record is not None and ROWID in record else JSON_LINES
    reader = registry.reader_for(record, framing) if record is not None else None
    if reader is None:
        return None
    try:
        with db.transaction(conn):
            now = time.time()
            parsed = reader.parse(conn, record, now, path) if reader.file_scoped else reader.parse(conn, record, now)
    except Exception:  # a malformed record of the format: the analyzer counts and skips it too
        return None
    if parsed.kind != EVENTS:
        return None
    return [event.block_id for event in parsed.events]
