"""One log line → block rows: decoding, the format's reader, and the one intake that merges block events.

Per line (a file may mix formats): the line must be a UTF-8 JSON object (a UTF-8 BOM on a file's
first line is ignored); it goes to the first reader of the :data:`~learnerd.analyzer.reader.JSON_LINES`
framing in :data:`learnerd.analyzer.registry.READERS` that detects it (learnerd's block log, foyle's
raw logs, Claude Code, Codex and OTLP/JSON lines, learnerd's own log lines, which are skipped), and the
block events that reader parses from it are merged into ``blocks`` here, the one place every reader's events
reach the store (a row of a SQLite log takes the same path from :func:`ingest_record` on). A JSON object
no reader detects is *foreign*: valid JSON from another program (runme's ``level``/``ts``/``msg``
lines, a service's own log), skipped as "not a block log" (the analyzer warns once per file).
Invalid JSON, a JSON value that is not an object, and a line its reader finds bad fields in are
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from learnerd.analyzer import registry
from learnerd.analyzer.fields import MalformedLine, UnknownEvent
from learnerd.analyzer.reader import EVENTS, JSON_LINES, Framing, Parsed, Reader
from learnerd.analyzer.sqlite_source import OVERSIZED as OVERSIZED_ROW
from learnerd.analyzer.tail import RawLine
from learnerd.privacy.redact import Redactor
from learnerd.store import pg, suggestions
from learnerd.store.assistant_sessions import add_rejected_attempts
from learnerd.store.blocks import REJECTED, BlockEvent, BlockRefused, LineOrigin, apply_event, suggestion_status_of

# What a line amounted to (the analyzer's counters follow these names): its reader's verdict, one of
# learnerd.analyzer.reader's EVENTS, PENDING, SKIPPED and UNJOINABLE, or one of these.
BLANK = "blank"
JOINED = "joined"  # block events that completed a trace, merged
FOREIGN = "foreign"  # valid JSON no reader detects: another program's, skipped
MALFORMED = "malformed"
UNKNOWN = "unknown"
OVERSIZED = "oversized"

DATABASE_FAILURES: tuple[type[BaseException], ...] = (
    sqlite3.OperationalError,
    sqlite3.InternalError,
    *pg.DATABASE_FAILURES,
)
"""Exceptions that mean the database failed (disk full, I/O error, locked, corrupt; on PostgreSQL also a
lost connection), not the line."""
STORE_ERRORS = (sqlite3.Error, pg.ERRORS)
"""Every exception either store backend raises."""


@dataclass
class LineResult:
    """``outcome`` is one of the constants above; ``changed`` the ids of blocks whose row changed;
    ``reason`` explains malformed / unknown / oversized / unjoinable / foreign lines; ``trace_id``
    names the trace a line completed or left pending; ``reader`` the name of the reader that detected
    the line (``""`` when none did); ``redacted`` the secrets replaced in it, by placeholder kind;
    ``rejected_attempts`` the (block, failed attempt it corrected) pairs it recorded anew and
    ``rejected_suggestions`` the blocks it newly made rejected suggestions (a tool call the person denied,
    a suggestion foyle logged as rejected): a line read again counts neither; ``refused`` why each block
    event of the line that :func:`~learnerd.store.blocks.apply_event` refused was (the line's other events
    are merged)."""

    outcome: str
    changed: list[str] = field(default_factory=list)
    reason: str = ""
    trace_id: str = ""
    reader: str = ""
    redacted: Counter[str] = field(default_factory=Counter)
    rejected_attempts: int = 0
    rejected_suggestions: int = 0
    refused: list[str] = field(default_factory=list)


def ingest_line(
    conn: sqlite3.Connection,
    raw: RawLine,
    now: float,
    redactor: Redactor | None = None,
    *,
    path: str = "",
    formats: frozenset[str] = frozenset(),
    join_window_s: float | None = None,
) -> LineResult:
    """Parse ``raw`` with its format's reader and merge what it says into ``blocks``, under a savepoint.

    With a ``redactor`` (:class:`learnerd.privacy.redact.Redactor`) every string of the decoded record is
    redacted before any reader sees it, so nothing a reader stores (block cells, half a foyle trace) holds
    a secret; the result's ``redacted`` counts the placeholders by kind. ``path`` is the file the line was
    read from (for a file-scoped reader, and stored with ``raw.number`` as the origin of an executed cell the
    line sets: :class:`~learnerd.store.blocks.LineOrigin`); ``formats``, when not empty, the names of the only
    readers that may detect it (``[analyzer] formats``). With ``join_window_s`` (seconds), every execution the
    line reports resolves the answer learnerd served in its session, if any, when its reader's sessions are named
    by learnerd's clients (:attr:`~learnerd.analyzer.reader.Reader.resolves_served`,
    :func:`learnerd.store.suggestions.resolve`); the served block is then among the changed ones.

    Must run inside a transaction (:func:`learnerd.store.db.transaction`); ``now`` (epoch seconds)
    stamps the rows it changes. Bad input never raises: whatever exception the line causes, what it
    wrote is rolled back to the savepoint and it comes back as a :data:`MALFORMED` result whose
    ``reason`` names the exception.

    Raises:
        sqlite3.OperationalError, sqlite3.InternalError, sqlite3.DatabaseError: the database failed
            (see :func:`is_database_failure`; the caller's transaction must roll back); also a
            ``BaseException`` that is not an ``Exception`` (cancellation, KeyboardInterrupt).
    """
    return _under_savepoint(conn, lambda: _ingest(conn, raw, now, redactor, path, formats, join_window_s))


def ingest_record(
    conn: sqlite3.Connection,
    record: dict[str, Any],
    framing: Framing,
    now: float,
    redactor: Redactor | None = None,
    *,
    path: str = "",
    line: int = 0,
    formats: frozenset[str] = frozenset(),
    join_window_s: float | None = None,
) -> LineResult:
    """:func:`ingest_line` for a record already cut out by its framing (a row of a SQLite log): offered to
    the readers of ``framing``, parsed and merged under its own savepoint, with the same guarantees (bad
    input never raises; a database failure does). ``line`` locates the record in ``path`` (a row's rowid).
    An oversized row (:data:`~learnerd.analyzer.sqlite_source.OVERSIZED`) is :data:`OVERSIZED`, not parsed.

    Raises:
        sqlite3.OperationalError, sqlite3.InternalError, sqlite3.DatabaseError: the database failed.
    """

    def run() -> LineResult:
        if OVERSIZED_ROW in record:
            size = record[OVERSIZED_ROW]
            return LineResult(
                OVERSIZED,
                reason=f"row of {size} bytes is over max_line_bytes"
                if size >= 0
                else "a value of the row is over max_line_bytes",
            )
        reader = registry.reader_for(record, framing, formats)
        if reader is None:
            readers = ", ".join(registry.reader_names(framing))
            return LineResult(FOREIGN, reason=f"a row no reader ({readers}) detects")
        return parse_record(conn, reader, record, now, redactor, path, join_window_s, _origin(path, line))

    return _under_savepoint(conn, run)


def _origin(path: str, line: int) -> LineOrigin | None:
    """Where a record was read, for the executed cells it sets (None when not read from a file)."""
    return LineOrigin(path, line) if path else None


def _under_savepoint(conn: sqlite3.Connection, ingest: Callable[[], LineResult]) -> LineResult:
    conn.execute("SAVEPOINT log_line")
    try:
        result = ingest()
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


def _ingest(
    conn: sqlite3.Connection,
    raw: RawLine,
    now: float,
    redactor: Redactor | None,
    path: str,
    formats: frozenset[str],
    join_window_s: float | None,
) -> LineResult:
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
    reader = registry.reader_for(obj, JSON_LINES, formats)
    if reader is None:
        return LineResult(FOREIGN, reason=foreign_reason(obj))
    return parse_record(conn, reader, obj, now, redactor, path, join_window_s, _origin(path, raw.number))


def parse_record(
    conn: sqlite3.Connection,
    reader: Reader,
    obj: dict[str, Any],
    now: float,
    redactor: Redactor | None,
    path: str,
    join_window_s: float | None,
    origin: LineOrigin | None = None,
) -> LineResult:
    """Redact ``obj`` (a record ``reader`` detected; only the part the reader reads, when it says which:
    :attr:`~learnerd.analyzer.reader.Reader.reads`), parse it and merge its block events (:func:`_intake`):
    the part of a record's intake every framing shares; ``origin`` is stored with the executed cells it sets.
    Runs in the caller's savepoint; raises what the reader raises."""
    redacted: Counter[str] = Counter()
    if reader.reads is not None:  # the part of the record the reader reads: all that needs redacting
        obj = reader.reads(obj)
    if redactor is not None:  # before the reader parses (and may store) anything of the record
        obj = redactor.redact_json(obj, redacted)
    # The reader may store state (half a trace) before the line is fully judged: the caller's
    # savepoint undoes it when the line turns out malformed.
    parsed = reader.parse(conn, obj, now, path) if reader.file_scoped else reader.parse(conn, obj, now)
    joins = join_window_s if reader.resolves_served else None  # only clients' sessions resolve served answers
    result = _intake(conn, parsed, now, reader.name, joins, origin)
    result.redacted = redacted
    return result


def foreign_reason(obj: dict[str, Any]) -> str:
    """Why a JSON object is taken for another program's log line: the first of its keys, and the
    readers that did not detect it."""
    keys = _printable(", ".join(repr(k) for k in list(obj)[:5]))
    readers = ", ".join(registry.reader_names(JSON_LINES))
    return f"not a block log: a JSON object with keys {keys or '(none)'} that no reader ({readers}) detects"


def _intake(
    conn: sqlite3.Connection,
    parsed: Parsed,
    now: float,
    reader: str,
    join_window_s: float | None,
    origin: LineOrigin | None = None,
) -> LineResult:
    """The one intake: a reader's verdict on a line → the line's result, its block events merged into
    ``blocks`` (:func:`learnerd.store.blocks.apply_event`), then (with ``join_window_s``) each execution
    joined to the served answer it ran (:func:`learnerd.store.suggestions.resolve`), and each event's rejected
    attempts recorded (:func:`learnerd.store.assistant_sessions.add_rejected_attempts`). Every reader's events
    reach the store here, and only here; any other verdict becomes the line's outcome as it is."""
    if parsed.kind == EVENTS:
        changed: list[str] = []
        merged: list[BlockEvent] = []
        refused: list[str] = []
        attempts = denied = 0
        for ev in parsed.events:
            newly_denied = ev.suggestion_status == REJECTED and suggestion_status_of(conn, ev.block_id) != REJECTED
            try:
                if apply_event(conn, ev, now, origin):
                    changed.append(ev.block_id)
                    denied += newly_denied
            except BlockRefused as exc:
                refused.append(str(exc))
                continue
            merged.append(ev)
            if ev.rejected_attempts:
                attempts += add_rejected_attempts(conn, ev.block_id, ev.rejected_attempts, now)
        if join_window_s is not None:
            resolved = (suggestions.resolve(conn, ev, now, join_window_s) for ev in merged)
            changed += [block_id for block_id in resolved if block_id is not None]
        kind = JOINED if parsed.joined else EVENTS
        return LineResult(
            kind,
            changed,
            trace_id=parsed.trace_id,
            reader=reader,
            rejected_attempts=attempts,
            rejected_suggestions=denied,
            refused=refused,
        )
    return LineResult(parsed.kind, reason=parsed.reason, trace_id=parsed.trace_id, reader=reader)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
