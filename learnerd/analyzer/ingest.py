"""One log line → block rows: format detection, parsing and merging, inside the batch's transaction.

Format rule, per line (a file may mix formats): the line must be a UTF-8 JSON object (a UTF-8 BOM
on a file's first line is ignored); one with a ``learnerd`` key is a block-log event
(:mod:`learnerd.analyzer.blocklog`), one with a string ``message`` is a foyle log line
(:mod:`learnerd.analyzer.foyle`); one with ``event`` and ``level`` (or ``log_level``) keys is learnerd's own
structlog output and is skipped (were learnerd's log written into a log directory, reporting its
lines as malformed would feed on itself, the trap foyle's analyzer documents); anything else is
malformed. Blank lines are ignored.

A line that turns out malformed leaves nothing behind while the rest of its batch commits: a
block-log event is validated before anything is written, and a foyle line runs under its own
SQLite savepoint.
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
UNJOINABLE = "unjoinable"
MALFORMED = "malformed"
UNKNOWN = "unknown"
OVERSIZED = "oversized"

_UNRECOGNISED = "neither a learnerd block-log event (no 'learnerd' key) nor a foyle log line (no string 'message')"


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
    """Parse ``raw`` and merge what it says into ``blocks`` (and ``foyle_traces``).

    Must run inside a transaction (:func:`learnerd.store.db.transaction`); ``now`` (epoch seconds)
    stamps the rows it changes. Bad input never raises: it comes back as a result.

    Raises:
        sqlite3.Error: the database failed (the caller's transaction must roll back).
    """
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
        return LineResult(MALFORMED, reason=f"invalid JSON: {exc}")
    if not isinstance(obj, dict):
        return LineResult(MALFORMED, reason="not a JSON object")
    try:
        if blocklog.is_block_log(obj):
            event = blocklog.parse_event(obj)  # pure: raises before anything is written
            return LineResult(EVENTS, changed=_apply(conn, [event], now))
        if foyle.is_foyle_line(obj):
            return _foyle(conn, obj, now)
    except MalformedLine as exc:
        return LineResult(MALFORMED, reason=str(exc))
    except UnknownEvent as exc:
        return LineResult(UNKNOWN, reason=str(exc))
    if "event" in obj and ("level" in obj or "log_level" in obj):
        return LineResult(SKIPPED)  # learnerd's own structlog line: a log dir holding it must not loop
    return LineResult(MALFORMED, reason=_UNRECOGNISED)


def _foyle(conn: sqlite3.Connection, obj: dict[str, Any], now: float) -> LineResult:
    """A foyle line, under a savepoint: a trace half is stored before the line is fully judged."""
    conn.execute("SAVEPOINT foyle_line")
    try:
        out = foyle.ingest_foyle_line(conn, obj, now)
        if out.kind == "events":
            result = LineResult(JOINED if out.joined else EVENTS, _apply(conn, out.events, now), trace_id=out.trace_id)
        elif out.kind == "pending":
            result = LineResult(PENDING, trace_id=out.trace_id)
        elif out.kind == "unjoinable":
            result = LineResult(UNJOINABLE, reason=out.reason, trace_id=out.trace_id)
        else:
            result = LineResult(SKIPPED)
    except BaseException:
        conn.execute("ROLLBACK TO foyle_line")
        conn.execute("RELEASE foyle_line")
        raise
    conn.execute("RELEASE foyle_line")
    return result


def _apply(conn: sqlite3.Connection, events: list[BlockEvent], now: float) -> list[str]:
    return [ev.block_id for ev in events if apply_event(conn, ev, now)]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
