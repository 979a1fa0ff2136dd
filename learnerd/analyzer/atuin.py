"""atuin's shell history (``history.db``) → blocks: one block per command a person (or an agent) ran.

atuin (github.com/atuinsh/atuin, MIT) records every command of an interactive shell in a SQLite database,
by default ``~/.local/share/atuin/history.db``. Its ``history`` table, as atuin's own migrations leave it
(``crates/atuin-client/migrations/*.sql`` @ 824c8716d82b; units from ``crates/atuin-client/src/database.rs``
``save_raw``): ``id`` (UUIDv7 hex), ``timestamp`` (start, Unix **nanoseconds**), ``duration`` (ns, ``-1``
while running), ``exit`` (the exit status, ``-1`` while running or unknown), ``command``, ``cwd``,
``session`` (the terminal session), ``hostname`` (``host:user``), ``deleted_at`` (soft delete, ns), and in
2026 versions ``author``, ``intent`` (an agent's stated reason), ``shell``, ``author_kind`` (1 user, 2
agent). Older databases lack the 2026 columns; they read as null. learnerd reads the rows read-only in
rowid order (:data:`~learnerd.analyzer.reader.SQLITE_ROWS`); a row is taken as atuin's (:data:`READER`)
when it has ``id``, ``timestamp``, ``command``, ``exit`` and ``cwd``.

A row is an executed cell (block id ``atuin:<id>``, exit status ``exit``, session ``session``: the
``$ATUIN_SESSION`` of its shell — atuin's, so a row never resolves an answer learnerd served, whatever session the
answer's client claimed: :attr:`~learnerd.analyzer.reader.Reader.resolves_served`) at its ``timestamp``. Its
intent:

- the row's own ``intent`` (agent rows), else
- the person's last turn in an assistant session (Claude Code, Codex CLI, OpenTelemetry GenAI) with the same
  working directory, spoken at most :data:`JOIN_WINDOW_S` before the command — the join by time and cwd;
- else none: the block is kept, and never learned (a command without an intent teaches nothing).

A session that is read after the atuin rows it would have joined does not join them (the join is made as
the row is read). A soft-deleted row is skipped. A row still running (``exit`` and ``duration`` -1) holds
the watermark until it ends — atuin updates the row in place, which a rowid watermark would not see —
for at most :data:`RUNNING_HOLD_S`; then it is read with an unknown exit status.
"""

from __future__ import annotations

import sqlite3

from learnerd.analyzer.fields import MalformedLine, check_type
from learnerd.analyzer.reader import EVENTS, SKIPPED, SQLITE_ROWS, Parsed, Reader, Record
from learnerd.analyzer.sessions import SHELL_LANGUAGE
from learnerd.store.assistant_sessions import session_near
from learnerd.store.blocks import BlockEvent, Cell

SOURCE = "atuin"
JOIN_WINDOW_S = 600.0
"""How long after an assistant session's last turn a command in its working directory still joins it."""
RUNNING_HOLD_S = 3600.0
"""How long a running command's row holds the watermark (a shell killed mid-command never ends its row)."""
_COLUMNS = ("id", "timestamp", "command", "exit", "cwd")
COLUMNS = (*_COLUMNS, "duration", "session", "deleted_at", "intent")
"""Every column of ``history`` this reader reads (the only ones selected)."""


def is_atuin_row(record: Record) -> bool:
    """Whether a row is from atuin's ``history`` table (it has atuin's columns)."""
    return all(column in record for column in _COLUMNS)


def is_running(record: Record, now: float) -> bool:
    """Whether a row is a command still running that started less than :data:`RUNNING_HOLD_S` before
    ``now`` (epoch seconds)."""
    if record.get("exit") != -1 or record.get("duration") != -1 or record.get("deleted_at") is not None:
        return False
    started = record.get("timestamp")
    return isinstance(started, int) and now - started / 1e9 < RUNNING_HOLD_S


def parse_row(conn: sqlite3.Connection, record: Record, now: float) -> Parsed:
    """One ``history`` row → the block of its command.

    Raises:
        MalformedLine: a column of the wrong type (a text ``timestamp``, a blank ``id``).
    """
    if record.get("deleted_at") is not None:
        return Parsed(SKIPPED)
    row_id = check_type(record["id"], str, "id")
    if not row_id:
        raise MalformedLine("column 'id' is empty")
    started = check_type(record["timestamp"], int, "timestamp")
    if started < 0:
        raise MalformedLine("column 'timestamp' is negative")
    when = started / 1e9
    command = check_type(record["command"], str, "command")
    exit_status = check_type(record["exit"], int, "exit")
    cwd = check_type(record["cwd"], str, "cwd")
    intent = record.get("intent")
    context: tuple[Cell, ...] = ()
    if isinstance(intent, str) and intent.strip():
        context = (Cell("markup", intent.strip(), "markdown"),)
    else:
        session = session_near(conn, cwd, when, JOIN_WINDOW_S)
        if session is not None:
            context = (Cell("markup", session.intent, "markdown"),)
    event = BlockEvent(
        f"{SOURCE}:{row_id}",
        SOURCE,
        when,
        context=context,
        executed=Cell("code", command, SHELL_LANGUAGE),
        exit_code=None if exit_status == -1 else exit_status,
        session=(record["session"] or None) if isinstance(record.get("session"), str) else None,
    )
    return Parsed(EVENTS, [event])


READER = Reader("atuin", SQLITE_ROWS, detect=is_atuin_row, parse=parse_row, holds=is_running, columns=COLUMNS)
"""atuin's ``history.db`` in the registry."""
