"""learnerd's own log lines (structlog's JSON output): recognised only to be skipped.

structlog writes one JSON object per line with the message under ``event`` and the level under
``level`` (``log_level`` where :mod:`structlog.stdlib`'s ``add_log_level`` names it so). Were learnerd's
log written into one of its log directories, reporting its lines as malformed or foreign would feed on
itself (each report a new line to report), the trap foyle's analyzer documents; so a JSON object with
``event`` and ``level`` (or ``log_level``) keys is taken as such a line and *skipped*: counted, silently.
"""

from __future__ import annotations

import sqlite3

from learnerd.analyzer.reader import JSON_LINES, SKIPPED, Parsed, Reader, Record


def is_own_log_line(record: Record) -> bool:
    """Whether a parsed JSON line looks like learnerd's own structlog output."""
    return "event" in record and ("level" in record or "log_level" in record)


def _skip(conn: sqlite3.Connection, record: Record, now: float) -> Parsed:
    return Parsed(SKIPPED)


READER = Reader("own-log", JSON_LINES, detect=is_own_log_line, parse=_skip)
