"""One log line → block rows: format detection, parsing and merging, inside the batch's transaction.

Format rule, per line (a file may mix formats): the line must be a UTF-8 JSON object (a UTF-8 BOM
on a file's first line is ignored); one with a ``learnerd`` key is a block-log event
(:mod:`learnerd.analyzer.blocklog`), one with a string ``message`` is a foyle log line
(:mod:`learnerd.analyzer.foyle`); one with ``event`` and ``level`` (or ``log_level``) keys is learnerd's own
structlog output and is skipped (were learnerd's log written into a log directory, reporting its
lines as malformed would feed on itself, the trap foyle's analyzer documents); any other JSON
object is *foreign*: valid JSON from another program (runme's ``level``/``ts``/``msg`` lines, a
service's own log) and skipped as "not a block log" (the analyzer warns once per file). Invalid
JSON, a JSON value that is not an object, and a block-log or foyle line with bad fields are
malformed. Blank lines are ignored.

:func:`ingest_line` is the one place where a line's failure becomes a result: every line runs under
its own SQLite savepoint, and *any* exception it raises (``MalformedLine``, but also an
``OverflowError`` from an integer SQLite cannot store, a ``RecursionError`` from JSON nested deeper
than Python's recursion limit, a ``UnicodeEncodeError`` from a lone surrogate escape such as
``"\\ud800"``, or a bug) rolls back what the line wrote and makes it a malformed line whose reason
names the exception; the rest of the batch commits. Only a failure of the database itself
(:data:`DATABASE_FAILURES`) is raised, so the caller's batch rolls back and is retried.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from learnerd.analyzer import blocklog, foyle
from learnerd.analyzer.fields import MalformedLine, UnknownEvent
from learnerd.analyzer.tail import RawLine
from learnerd.store.blocks import BlockEvent, apply_event

# What a line amounted to (the analyzer's counters follow these names).
BLANK = "blank"
EVENTS = "events"  # block events merged (a block-log event, a foyle LogEvent)
JOINED = "joined"  # a foyle trace completed and merged
PENDING = "pending"  # half a foyle trace, kept for its other half
SKIPPED = "skipped"  # a foyle (or learnerd's own) log line that carries nothing learnerd uses
FOREIGN = "foreign"  # valid JSON from another program: skipped, not a block log
UNJOINABLE = "unjoinable"
MALFORMED = "malformed"
UNKNOWN = "unknown"
OVERSIZED = "oversized"

DATABASE_FAILURES: tuple[type[BaseException], ...] = (sqlite3.OperationalError, sqlite3.InternalError)
"""Exceptions that mean the database failed (disk full, I/O error, locked, corrupt), not the line."""


@dataclass
class LineResult:
    """``outcome`` is one of the constants above; ``changed`` the ids of blocks whose row changed;
    ``reason`` explains malformed / unknown / oversized / unjoinable lines; ``trace_id`` names the
    foyle trace a line completed or left pending."""

    outcome: str
    changed: list[str] = field(default_factory=list)
    reason: str = ""
    trace_id: str = ""


def ingest_line(conn: sqlite3.Connection, raw: RawLine, now: float) -> LineResult:
    """Parse ``raw`` and merge what it says into ``blocks`` (and ``foyle_traces``), under a savepoint.

    Must run inside a transaction (:func:`learnerd.store.db.transaction`); ``now`` (epoch seconds)
    stamps the rows it changes. Bad input never raises: whatever exception the line causes, what it
    wrote is rolled back to the savepoint and it comes back as a :data:`MALFORMED` result whose
    ``reason`` names the exception.

    Raises:
        sqlite3.OperationalError, sqlite3.InternalError, sqlite3.DatabaseError: the database failed
            (see :func:`is_database_failure`; the caller's transaction must roll back); also a
            ``BaseException`` that is not an ``Exception`` (cancellation, KeyboardInterrupt).
    """
    conn.execute("SAVEPOINT log_line")
    try:
        result = _ingest(conn, raw, now)
    except UnknownEvent as exc:
        _rollback_to_savepoint(conn)
        return LineResult(UNKNOWN, reason=_printable(str(exc)))
    except Exception as exc:
        _rollback_to_savepoint(conn)
        if is_database_failure(exc):
            raise
        return LineResult(MALFORMED, reason=failure_reason(exc))
    except BaseException:
        _rollback_to_savepoint(conn)
        raise
    conn.execute("RELEASE log_line")
    return result


def is_database_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the database failed (:data:`DATABASE_FAILURES`, or a bare
    ``sqlite3.DatabaseError`` such as "file is not a database") rather than the input."""
    return isinstance(exc, DATABASE_FAILURES) or type(exc) is sqlite3.DatabaseError


def failure_reason(exc: BaseException) -> str:
    """A short, loggable reason for an exception a line caused: its type and message (at most 300
    characters, lone surrogates escaped so the reason itself can always be written)."""
    if isinstance(exc, MalformedLine):
        return _printable(str(exc))
    if isinstance(exc, RecursionError):
        return "RecursionError: JSON nested deeper than this Python can parse"
    message = str(exc)
    return _printable(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def _printable(text: str) -> str:
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 300 else text[:299] + "…"


def _rollback_to_savepoint(conn: sqlite3.Connection) -> None:
    conn.execute("ROLLBACK TO log_line")
    conn.execute("RELEASE log_line")


def _ingest(conn: sqlite3.Connection, raw: RawLine, now: float) -> LineResult:
    if raw.continuation:
        if raw.data is not None and not raw.data.strip():
            return LineResult(BLANK)
        return LineResult(MALFORMED, reason="bytes appended to a line already read as a complete JSON object")
    if raw.data is None:
        return LineResult(OVERSIZED, reason=f"line of {raw.length} bytes is over max_line_bytes")
    data = raw.data
    if raw.number == 1 and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        return LineResult(BLANK)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return LineResult(MALFORMED, reason=f"invalid UTF-8 at byte {exc.start}")
    try:
        obj = _DECODER.decode(text)
    except ValueError as exc:
        return LineResult(MALFORMED, reason=_printable(f"invalid JSON: {exc}"))
    if not isinstance(obj, dict):
        return LineResult(MALFORMED, reason="not a JSON object")
    if blocklog.is_block_log(obj):
        event = blocklog.parse_event(obj)  # raises MalformedLine / UnknownEvent
        return LineResult(EVENTS, changed=_apply(conn, [event], now))
    if foyle.is_foyle_line(obj):
        return _foyle(conn, obj, now)
    if "event" in obj and ("level" in obj or "log_level" in obj):
        return LineResult(SKIPPED)  # learnerd's own structlog line: a log dir holding it must not loop
    return LineResult(FOREIGN, reason=foreign_reason(obj))


def foreign_reason(obj: dict[str, Any]) -> str:
    """Why a JSON object is taken for another program's log line: the first of its keys."""
    keys = _printable(", ".join(repr(k) for k in list(obj)[:5]))
    return f"not a block log: a JSON object with keys {keys or '(none)'} and no 'learnerd' key or string 'message'"


def _foyle(conn: sqlite3.Connection, obj: dict[str, Any], now: float) -> LineResult:
    """A foyle line (a trace half is stored before the line is fully judged: the caller's savepoint
    undoes it when the line turns out malformed)."""
    out = foyle.ingest_foyle_line(conn, obj, now)
    if out.kind == "events":
        return LineResult(JOINED if out.joined else EVENTS, _apply(conn, out.events, now), trace_id=out.trace_id)
    if out.kind == "pending":
        return LineResult(PENDING, trace_id=out.trace_id)
    if out.kind == "unjoinable":
        return LineResult(UNJOINABLE, reason=out.reason, trace_id=out.trace_id)
    return LineResult(SKIPPED)


def _apply(conn: sqlite3.Connection, events: list[BlockEvent], now: float) -> list[str]:
    return [ev.block_id for ev in events if apply_event(conn, ev, now)]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
