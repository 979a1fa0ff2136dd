"""The blocks a log file speaks of (``learnerd forget --source FILE``), read by the same readers as the
analyzer (:data:`~learnerd.analyzer.registry.READERS`), so every format it learns from can be forgotten by file.

Each line is decoded and parsed like the analyzer's intake does (:mod:`learnerd.analyzer.ingest`), against a
scratch in-memory SQLite store (a reader may keep half a trace in the store; nothing of the real one is
read or written). Lines that are blank, not JSON, foreign or malformed are counted and skipped.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from learnerd.analyzer import registry
from learnerd.analyzer.reader import EVENTS, JSON_LINES
from learnerd.store import db


@dataclass
class FileBlocks:
    """``block_ids``: every block id the file's records name, in order of first mention; ``skipped``: how
    many non-blank lines named none (not JSON, foreign, malformed, a trace half without its other half)."""

    block_ids: list[str] = field(default_factory=list)
    skipped: int = 0


def block_ids_in_file(path: Path) -> FileBlocks:
    """The blocks ``path`` (a JSON-lines log file) names (see the module docstring).

    Raises:
        OSError: the file cannot be read.
    """
    found: dict[str, None] = {}
    result = FileBlocks()
    scratch = db.connect_sqlite(":memory:")
    try:
        with path.open("rb") as lines:
            for raw in lines:
                ids = _line_block_ids(scratch, raw)
                if ids is None:
                    result.skipped += 1
                found.update(dict.fromkeys(ids or ()))
    finally:
        scratch.close()
    result.block_ids = list(found)
    return result


def _line_block_ids(conn: sqlite3.Connection, raw: bytes) -> list[str] | None:
    """The block ids one line names; [] for a blank line; None for a line that names none."""
    if not raw.strip():
        return []
    try:
        record = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError):
        return None
    reader = registry.reader_for(record, JSON_LINES) if isinstance(record, dict) else None
    if reader is None:
        return None
    try:
        with db.transaction(conn):
            parsed = reader.parse(conn, record, time.time())
    except Exception:  # a malformed record of the format: the analyzer counts and skips it too
        return None
    if parsed.kind != EVENTS:
        return None
    return [event.block_id for event in parsed.events]
