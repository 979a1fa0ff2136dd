"""learnerd's own block-log format, version 1: one JSON object per line, one event per object.

An assistant (or a converter such as ``benchmarks/``' tldr script) writes these lines so learnerd can
learn from it without knowing its internal traces. Each event says one thing about one block (a
notebook cell): the document it was written in, what the assistant generated for it, or what the
person executed. Events for one block, in any order and in any files, merge into one block row
(:func:`learnerd.store.blocks.apply_event`): each part keeps the value of its newest event, so
re-reading a file changes nothing and a newer execution replaces an older one. The full
specification, with examples, is ``docs/block-log-format.md``.

Line framing: UTF-8, LF-terminated (a CR before the LF is tolerated), at most
``[analyzer] max_line_bytes`` bytes. A line is recognised as a block-log event by its ``learnerd``
key (:data:`READER`, first in :data:`learnerd.analyzer.registry.READERS`); any other JSON object is
offered to the next format in the registry.

Fields common to every event:

``learnerd`` (integer, required)
    The format version: ``1``. A higher integer is counted as an unknown event (a newer writer).
``type`` (string, required)
    ``"context"``, ``"generated"`` or ``"executed"``. Another string is counted as an unknown event.
``block_id`` (string, required)
    The block's id, 1 to 256 characters; the same id in every event about that block.
``time`` (string or number, required)
    When it happened: an RFC 3339 date-time with an offset (``"2024-05-01T12:00:00.250Z"``) or epoch
    seconds (``1714564800.25``). Orders the events of a block; it is not when the line was read.
``eval_mode`` (boolean, optional, default false)
    The block was produced while evaluating the assistant; such blocks are never learned from.
    Once an event marks a block as eval mode, it stays so.
``session`` (string, optional, 1 to 256 characters)
    The session the event happened in (an assistant's conversation, a terminal), as the writer names
    it; all events of a block name the same one. An executed event in session S resolves the answer learnerd served
    a bearer of its token with ``metadata={"session": S}`` (:mod:`learnerd.store.suggestions`).

Per type:

``context``: ``cells`` (array of cells, required, may be empty)
    The document before the block, in order: the markdown and code cells the person had when the
    block was generated or executed.
``generated``: ``cell`` (cell, required)
    What the assistant suggested for the block.
``executed``: ``cell`` (cell of kind ``"code"``, required) and ``exit_code`` (integer or null, required)
    What the person actually ran, and its exit status (null when unknown).

A cell is an object with ``kind`` (``"markup"`` for markdown prose or ``"code"``), ``text`` (string)
and ``language`` (string, optional, default ``""``; e.g. ``"bash"``, ``"markdown"``).

Keys not listed here are ignored, so a version-1 writer may add fields; anything listed that is
missing or of the wrong type makes the line malformed (counted, logged with file and line, skipped).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from learnerd.analyzer.fields import MalformedLine, UnknownEvent, check_type, optional, parse_time, require
from learnerd.analyzer.reader import EVENTS, JSON_LINES, Parsed, Reader
from learnerd.store.blocks import CELL_KINDS, BlockEvent, Cell

FORMAT_VERSION = 1
VERSION_KEY = "learnerd"
EVENT_TYPES = ("context", "generated", "executed")
MAX_BLOCK_ID_CHARS = 256
SOURCE = "learnerd"


def is_block_log(obj: dict[str, Any]) -> bool:
    """Whether a parsed JSON line claims to be a block-log event (it has the ``learnerd`` key)."""
    return VERSION_KEY in obj


def parse_event(obj: dict[str, Any]) -> BlockEvent:
    """A parsed block-log line → the :class:`BlockEvent` it describes (``source="learnerd"``).

    Raises:
        MalformedLine: a required field is missing or has the wrong type or value.
        UnknownEvent: ``type`` is not one of :data:`EVENT_TYPES`, or ``learnerd`` is a version
            above :data:`FORMAT_VERSION`.
    """
    version = require(obj, VERSION_KEY, int)
    if version > FORMAT_VERSION:
        raise UnknownEvent(f"block-log version {version} (this learnerd reads version {FORMAT_VERSION})")
    if version < FORMAT_VERSION:
        raise MalformedLine(f"block-log version must be {FORMAT_VERSION}, not {version}")
    event_type = require(obj, "type", str)
    if event_type not in EVENT_TYPES:
        raise UnknownEvent(f"unknown event type {event_type!r}")
    block_id = require(obj, "block_id", str)
    if not 1 <= len(block_id) <= MAX_BLOCK_ID_CHARS:
        raise MalformedLine(f"block_id must be 1 to {MAX_BLOCK_ID_CHARS} characters long")
    when = parse_time(obj.get("time"))
    eval_mode = optional(obj, "eval_mode", bool, False)
    session = optional(obj, "session", str, None)
    if session is not None and not 1 <= len(session) <= MAX_BLOCK_ID_CHARS:
        raise MalformedLine(f"session must be 1 to {MAX_BLOCK_ID_CHARS} characters long")
    if event_type == "context":
        cells = require(obj, "cells", list)
        context = tuple(_cell(c, f"cells[{i}]") for i, c in enumerate(cells))
        return BlockEvent(block_id, SOURCE, when, context=context, eval_mode=eval_mode, session=session)
    cell = _cell(require(obj, "cell", dict), "cell")
    if event_type == "generated":
        return BlockEvent(block_id, SOURCE, when, generated=cell, eval_mode=eval_mode, session=session)
    if cell.kind != "code":
        raise MalformedLine("an executed cell must be of kind 'code'")
    if "exit_code" not in obj:
        raise MalformedLine("missing field 'exit_code' (null when unknown)")
    exit_code = optional(obj, "exit_code", int, None)
    return BlockEvent(block_id, SOURCE, when, executed=cell, exit_code=exit_code, eval_mode=eval_mode, session=session)


def _parse(conn: sqlite3.Connection, obj: dict[str, Any], now: float) -> Parsed:
    return Parsed(EVENTS, [parse_event(obj)])


READER = Reader("blocklog", JSON_LINES, detect=is_block_log, parse=_parse, resolves_served=True)
"""learnerd's block log in the registry: each line one event, merged as it comes; its sessions are named by
learnerd's clients, so its executions resolve the answers served in the same session."""


def _cell(raw: Any, where: str) -> Cell:
    check_type(raw, dict, where)
    kind = require(raw, "kind", str, where)
    if kind not in CELL_KINDS:
        raise MalformedLine(f"field '{where}.kind' must be one of {', '.join(CELL_KINDS)}, not {kind!r}")
    text = require(raw, "text", str, where)
    language = optional(raw, "language", str, "", where)
    return Cell(kind=kind, text=text, language=language)


def event_line(
    event_type: str,
    block_id: str,
    time: float | str,
    *,
    cells: Sequence[Cell] | None = None,
    cell: Cell | None = None,
    exit_code: int | None = None,
    eval_mode: bool = False,
    session: str | None = None,
) -> str:
    """One block-log line (with its trailing newline) for writers: converters, tests, benchmarks.

    Pass ``cells`` for ``"context"``, ``cell`` for ``"generated"``, ``cell`` and ``exit_code`` for
    ``"executed"``; ``session`` for any. The result always parses back with :func:`parse_event`.

    Raises:
        ValueError: the arguments do not fit ``event_type``.
    """
    obj: dict[str, Any] = {VERSION_KEY: FORMAT_VERSION, "type": event_type, "block_id": block_id, "time": time}
    if event_type == "context":
        if cells is None:
            raise ValueError("a context event needs cells")
        obj["cells"] = [c.to_json() for c in cells]
    elif event_type in ("generated", "executed"):
        if cell is None:
            raise ValueError(f"a {event_type} event needs a cell")
        obj["cell"] = cell.to_json()
        if event_type == "executed":
            obj["exit_code"] = exit_code
    else:
        raise ValueError(f"unknown event type {event_type!r}")
    if eval_mode:
        obj["eval_mode"] = True
    if session is not None:
        obj["session"] = session
    parse_event(obj)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"
