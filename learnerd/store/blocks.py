"""Blocks: one row per notebook cell the assistant generated or the person ran (foyle's BlockLog, TN005).

Every input format turns its lines into :class:`BlockEvent` values; :func:`apply_event` merges an
event into the block's row. Each of the three parts of a block — the document context before it,
the generated cell, the executed cell — carries the event time it came from, and an event only
replaces a part whose stored time is not newer, so merging is order-independent and replaying an
event changes nothing. ``updated_at`` is the wall-clock time the row last changed; an event that
changes nothing leaves it alone (that is what makes a replay a no-op for ``backfill --since``).

Refused events (:class:`BlockRefused`, raised by :func:`apply_event` before anything is written): an event
whose time is not finite or is more than :data:`MAX_FUTURE_S` after now (merging is newest-wins, so a
``time: 1e300`` would pin a block's cells for ever), and an event of another source than the block's that
says something the block already holds: a block's parts are replaced only by the source that made the block,
so a block-log line or ``POST /v1/blocks`` cannot rewrite an atuin or Claude Code block by naming its id.
Another source may still fill a part the block lacks (foyle logs a cell's context and suggestion, a learnerd
block-log line in the same file its execution).

Provenance: the executed part also keeps where it was read (:class:`LineOrigin`: the log file and the line),
set when the part changes (the same event read again from another file keeps the first origin), so an example
(id = block id) can be traced to the line a person's command came from.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from learnerd.store.db import Migration
from learnerd.store.locks import lock_for_merge

MIGRATIONS = (
    Migration(
        "blocks",
        1,
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
        CREATE INDEX blocks_updated_at ON blocks(updated_at)
        """,
    ),
    # 2: the generated cell keeps its kind (foyle generates markup blocks as well as code blocks).
    Migration("blocks", 2, "ALTER TABLE blocks ADD COLUMN generated_kind TEXT NOT NULL DEFAULT 'code'"),
    # 3: the session id of the program that logged the block (joins executions to served answers:
    # learnerd.store.suggestions).
    Migration("blocks", 3, "ALTER TABLE blocks ADD COLUMN session TEXT"),
    # 4: provenance: where the executed cell was read (the log file and its 1-based line number), so an adapter
    # version's manifest.json and `learnerd why` can name the line an example came from. NULL for blocks
    # ingested before (and for cells not read from a file).
    Migration(
        "blocks",
        4,
        "ALTER TABLE blocks ADD COLUMN executed_path TEXT; ALTER TABLE blocks ADD COLUMN executed_line INTEGER",
    ),
)

CELL_KINDS = ("markup", "code")
MAX_FUTURE_S = 86400.0
"""An event time more than this many seconds after now is refused (clocks disagree by seconds, not a day)."""


class BlockRefused(ValueError):
    """An event :func:`apply_event` will not merge (see the module docstring); the message says why."""


def check_time(time: float, now: float) -> None:
    """Refuse an event ``time`` (epoch seconds) that is not finite or is more than :data:`MAX_FUTURE_S` after
    ``now``.

    Raises:
        BlockRefused: naming the time.
    """
    if not math.isfinite(time) or time > now + MAX_FUTURE_S:
        raise BlockRefused(f"event time {time!r} is more than a day after now ({now:.0f})")


@dataclass(frozen=True)
class Cell:
    """One notebook cell: ``kind`` is ``"markup"`` (markdown prose) or ``"code"``."""

    kind: str
    text: str
    language: str = ""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "language": self.language, "text": self.text}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Cell:
        return cls(kind=raw["kind"], text=raw["text"], language=raw.get("language", ""))


REJECTED = "rejected"
"""A block's ``suggestion_status`` when the person refused its suggestion (a denied tool call, foyle's
``rejected`` event)."""


@dataclass(frozen=True)
class BlockEvent:
    """What one log line (or one joined trace) says about one block. ``None`` means "not said".

    ``time`` is the event's own time in seconds since the epoch (it orders events, it is not when
    the line was read). ``session`` is the id of the session the event happened in (an assistant's
    conversation, a shell), as the program that logged it names it (a block's events name one session;
    should they differ, the last merged wins); it joins executions to the answers learnerd served in
    that session (:mod:`learnerd.store.suggestions`). ``rejected_attempts`` are the ids of the failed blocks
    this one corrected (an assistant's session: :mod:`learnerd.store.assistant_sessions`); the analyzer's
    intake records them, not :func:`apply_event`.
    """

    block_id: str
    source: str
    time: float
    context: tuple[Cell, ...] | None = None
    generated: Cell | None = None
    executed: Cell | None = None
    exit_code: int | None = None
    eval_mode: bool | None = None
    suggestion_status: str | None = None
    session: str | None = None
    rejected_attempts: tuple[str, ...] = ()


@dataclass(frozen=True)
class LineOrigin:
    """Where an event was read: ``path`` of the log file, ``line`` its 1-based line number."""

    path: str
    line: int


@dataclass
class Block:
    """A block row as stored."""

    id: str
    source: str
    context: list[Cell] = field(default_factory=list)
    generated: Cell | None = None
    executed: Cell | None = None
    exit_code: int | None = None
    eval_mode: bool = False
    suggestion_status: str | None = None
    session: str | None = None
    event_time: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    executed_time: float | None = None
    executed_origin: LineOrigin | None = None


def _cells_json(cells: tuple[Cell, ...] | list[Cell]) -> str:
    return json.dumps([c.to_json() for c in cells], ensure_ascii=False, separators=(",", ":"))


def _row_to_block(row: sqlite3.Row) -> Block:
    generated = (
        Cell(row["generated_kind"], row["generated"], row["generated_language"] or "")
        if row["generated"] is not None
        else None
    )
    executed = Cell("code", row["executed"], row["executed_language"] or "") if row["executed"] is not None else None
    return Block(
        id=row["id"],
        source=row["source"],
        context=[Cell.from_json(c) for c in json.loads(row["context"])],
        generated=generated,
        executed=executed,
        exit_code=row["exit_code"],
        eval_mode=bool(row["eval_mode"]),
        suggestion_status=row["suggestion_status"],
        session=row["session"],
        event_time=row["event_time"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        executed_time=row["executed_time"],
        executed_origin=(
            LineOrigin(row["executed_path"], row["executed_line"]) if row["executed_path"] is not None else None
        ),
    )


def get_block(conn: sqlite3.Connection, block_id: str) -> Block | None:
    """The stored block ``block_id``, or None."""
    row = conn.execute("SELECT * FROM blocks WHERE id = ?", (block_id,)).fetchone()
    return _row_to_block(row) if row is not None else None


def _held_parts(row: Any, ev: BlockEvent) -> list[str]:
    """The parts ``ev`` says something about that the stored ``row`` already holds."""
    said = {
        "context": (ev.context is not None, row["context"] != "[]"),
        "generated cell": (ev.generated is not None, row["generated"] is not None),
        "executed cell": (ev.executed is not None, row["executed"] is not None),
        "session": (ev.session is not None, row["session"] is not None),
        "suggestion status": (ev.suggestion_status is not None, row["suggestion_status"] is not None),
        "eval mode": (bool(ev.eval_mode), bool(row["eval_mode"])),
    }
    return [part for part, (says, holds) in said.items() if says and holds]


def _newer(event_time: float, stored_time: float | None) -> bool:
    return stored_time is None or event_time >= stored_time


def apply_event(conn: sqlite3.Connection, ev: BlockEvent, now: float, origin: LineOrigin | None = None) -> bool:
    """Merge ``ev`` into its block's row (inserting the row if new); return True if the row changed.

    Call it inside a transaction (:func:`learnerd.store.db.transaction`) together with the watermark
    of the line the event came from. ``now`` (epoch seconds) becomes ``updated_at`` when the row changes.
    ``origin`` (the file and line ``ev`` was read from) is stored with the executed cell when ``ev`` sets it.

    Raises:
        BlockRefused: ``ev``'s time is more than a day after ``now`` (:func:`check_time`), or the block is of
            another source than ``ev.source`` and already holds a part ``ev`` sets; nothing was written.

    The merge reads the row, then writes it whole: under :func:`learnerd.store.locks.lock_for_merge`, so
    replicas on several hosts merging events of one block at once (its context logged on one host, its
    execution on another) take turns on PostgreSQL.
    """
    check_time(ev.time, now)
    lock_for_merge(conn, "blocks", ev.block_id)
    row = conn.execute("SELECT * FROM blocks WHERE id = ?", (ev.block_id,)).fetchone()
    if row is not None and row["source"] != ev.source:
        held = _held_parts(row, ev)
        if held:
            raise BlockRefused(
                f"block {ev.block_id!r} of the source {row['source']!r} already holds its {', '.join(held)}; "
                f"the source {ev.source!r} may not replace them"
            )
    old: dict[str, Any] = dict(row) if row is not None else {}
    new: dict[str, Any] = (
        dict(old)
        if old
        else {
            "id": ev.block_id,
            "source": ev.source,
            "context": "[]",
            "context_time": None,
            "generated": None,
            "generated_language": None,
            "generated_kind": "code",
            "generated_time": None,
            "executed": None,
            "executed_language": None,
            "exit_code": None,
            "eval_mode": 0,
            "executed_time": None,
            "executed_path": None,
            "executed_line": None,
            "suggestion_status": None,
            "session": None,
            "event_time": None,
            "created_at": now,
            "updated_at": now,
        }
    )
    if ev.context is not None and _newer(ev.time, new["context_time"]):
        new["context"] = _cells_json(ev.context)
        new["context_time"] = ev.time
    if ev.generated is not None and _newer(ev.time, new["generated_time"]):
        new["generated"] = ev.generated.text
        new["generated_language"] = ev.generated.language
        new["generated_kind"] = ev.generated.kind
        new["generated_time"] = ev.time
    if ev.executed is not None and _newer(ev.time, new["executed_time"]):
        before = (new["executed"], new["executed_language"], new["exit_code"], new["executed_time"])
        new["executed"] = ev.executed.text
        new["executed_language"] = ev.executed.language
        new["exit_code"] = ev.exit_code
        new["executed_time"] = ev.time
        changed = before != (new["executed"], new["executed_language"], new["exit_code"], new["executed_time"])
        if changed or (new["executed_path"] is None and origin is not None):  # the same event read again: kept
            new["executed_path"] = origin.path if origin is not None else None
            new["executed_line"] = origin.line if origin is not None else None
    if ev.eval_mode:
        new["eval_mode"] = 1
    if ev.suggestion_status is not None:
        new["suggestion_status"] = ev.suggestion_status
    if ev.session is not None:
        new["session"] = ev.session
    new["event_time"] = ev.time if new["event_time"] is None else max(new["event_time"], ev.time)
    if new == old:
        return False
    new["updated_at"] = now
    columns = list(new)
    conn.execute(
        f"INSERT OR REPLACE INTO blocks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [new[c] for c in columns],
    )
    return True


def suggestion_status_of(conn: sqlite3.Connection, block_id: str) -> str | None:
    """The stored ``suggestion_status`` of a block (None for a block without one, or no such block)."""
    row = conn.execute("SELECT suggestion_status FROM blocks WHERE id = ?", (block_id,)).fetchone()
    return row[0] if row is not None else None


def list_block_ids(conn: sqlite3.Connection, updated_since: float | None = None) -> list[str]:
    """Ids of all blocks, or of those with ``updated_at >= updated_since`` (epoch seconds), oldest first."""
    if updated_since is None:
        rows = conn.execute("SELECT id FROM blocks ORDER BY updated_at, id")
    else:
        rows = conn.execute("SELECT id FROM blocks WHERE updated_at >= ? ORDER BY updated_at, id", (updated_since,))
    return [r[0] for r in rows]


def count_blocks(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
