"""foyle's raw JSON logs → block events (what foyle's own ``analyze.Analyzer`` extracts, TN005).

foyle (github.com/jlewi/foyle) logs with zap, one JSON object per line with ``severity``, ``time``
(epoch seconds), ``caller``, ``function`` (the Go function that logged), ``message`` and, inside a
request, ``traceId``. A line is taken as foyle's (:data:`READER`) when it is a JSON object with a
string ``message`` that the block log, before foyle in :data:`learnerd.analyzer.registry.READERS`, did
not claim (it has no ``learnerd`` key). Three kinds of line matter; every other foyle line (server start-up,
OpenAI request/response, ``Agent.Generate returning blocks``, streaming traces) is *skipped*:
counted, not an error.

**Agent.Generate traces** (``function`` ends in ``agent.(*Agent).Generate``): the request half
carries ``request.doc.blocks`` (the document the person had), the response half
``response.blocks[]`` (the generated blocks, each with its ``id``). Joined, every response block
with an id becomes a block whose context is the request document's cells and whose generated cell
is that response block. A response without any block id is *unjoinable* (``no_block_ids``).

**Executor.Execute traces** (``function`` ends in ``executor.(*Executor).Execute``): the request
half carries ``request.block`` (the executed cell; its id in ``request.block.id`` or the line's
``blockId``), the response half ``response.outputs[].items[].text_data``, where foyle's executor
writes ``exitCode: N``. Joined, the block gets that executed cell and exit code; a trace whose block
id is empty (as in foyle's own test data) is *unjoinable* (``empty_block_id``).

**LogEvent lines** (``function`` ``agent.(*Agent).LogEvents``, message ``LogEvent``) carry a runme
event in ``event``: ``EXECUTE`` gives the executed cell of the block ``event.selectedId`` (or the
line's ``selectedCellId``), found by id (metadata ``runme.dev/id`` or ``id``) among
``event.cells[]`` — its exit code is taken from the cell's ``executionSummary.success`` when runme
recorded one (true → 0, false → 1), else unknown; ``ACCEPTED`` / ``REJECTED`` set the suggestion
status of the event's cells, or of the selected block when it lists none. Other event types are
skipped. Unjoinable: ``missing_selected_id``, ``cell_not_found``, ``not_a_code_cell``.

Eval mode: foyle's agent and executor add ``"evalMode": true`` to their log lines when running an
evaluation (``config.EvalMode()``); as in foyle's ``combineGenerateTrace``, a trace is in eval mode
when either half says so, and its blocks are marked ``eval_mode``.

A trace's halves arrive on different lines, possibly in different batches or across a restart:
the first half seen is kept in the ``foyle_traces`` table (same transaction as the watermark) and
joined when the other arrives, in either order; the row is deleted once the trace is consumed.
Event times are the response half's ``time`` (or the LogEvent line's). Block kinds map ``MARKUP`` /
``CELL_KIND_MARKUP`` to ``markup`` and ``CODE`` / ``CELL_KIND_CODE`` to ``code``; foyle leaves
empty fields out of its JSON, so missing ``contents``, ``language``, ``id`` or ``blocks`` read as empty.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from learnerd.analyzer.fields import MalformedLine, check_type, optional, parse_time, require
from learnerd.analyzer.reader import EVENTS, JSON_LINES, PENDING, SKIPPED, UNJOINABLE, Parsed, Reader
from learnerd.store.blocks import BlockEvent, Cell
from learnerd.store.foyle_traces import (
    PartialTrace,
    count_partial_traces,
    delete_partial_trace,
    get_partial_trace,
    put_partial_trace,
)
from learnerd.store.locks import lock_for_merge

SOURCE = "foyle"

_GENERATE = re.compile(r"agent\.\(\*Agent\)\.Generate(\.func\d+)*$")
_EXECUTE = re.compile(r"executor\.\(\*Executor\)\.Execute(\.func\d+)*$")
_LOG_EVENTS = re.compile(r"agent\.\(\*Agent\)\.LogEvents(\.func\d+)*$")
_EXIT_CODE = re.compile(r"^\s*exitCode:\s*(-?\d+)\s*$")

_MARKUP_KINDS = ("MARKUP", "CELL_KIND_MARKUP", 1)
_CODE_KINDS = ("CODE", "CELL_KIND_CODE", 2)


def is_foyle_line(obj: dict[str, Any]) -> bool:
    """Whether a parsed JSON line looks like one of foyle's zap log lines (a string ``message``)."""
    return isinstance(obj.get("message"), str)


def ingest_foyle_line(conn: sqlite3.Connection, obj: dict[str, Any], now: float) -> Parsed:
    """Classify one foyle line and, for a trace half, store or join it in ``foyle_traces``.

    Call inside the transaction that also writes the line's watermark; ``now`` (epoch seconds) is
    the partial trace's ``updated_at``. The returned events are not yet applied to ``blocks``; a
    half trace is :data:`~learnerd.analyzer.reader.PENDING`, a LogEvent's unjoinable result has no
    ``trace_id``.

    Raises:
        MalformedLine: a line of a kind that matters (trace half, LogEvent) with missing or
            ill-typed fields.
    """
    function = obj.get("function")
    if not isinstance(function, str):
        return Parsed(SKIPPED)
    if _LOG_EVENTS.search(function) or obj.get("message") == "LogEvent":
        return _log_event(obj)
    if _GENERATE.search(function):
        kind = "generate"
        if isinstance(obj.get("request"), dict) and "doc" in obj["request"]:
            half = "request"
        elif isinstance(obj.get("response"), dict):
            half = "response"
        else:
            return Parsed(SKIPPED)
    elif _EXECUTE.search(function):
        kind = "execute"
        if isinstance(obj.get("request"), dict) and "block" in obj["request"]:
            half = "request"
        elif isinstance(obj.get("response"), dict):
            half = "response"
        else:
            return Parsed(SKIPPED)
    else:
        return Parsed(SKIPPED)
    return _trace_half(conn, obj, kind, half, now)


def _trace_half(conn: sqlite3.Connection, obj: dict[str, Any], kind: str, half: str, now: float) -> Parsed:
    trace_id = require(obj, "traceId", str)
    if not trace_id:
        raise MalformedLine("field 'traceId' is empty")
    when = parse_time(obj.get("time"))
    eval_mode = optional(obj, "evalMode", bool, False)
    _validate_half(obj, kind, half)  # refuse a bad half now, not when its partner arrives
    raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    lock_for_merge(conn, "foyle_traces", trace_id)  # the other half may be ingested on another host now
    stored = get_partial_trace(conn, trace_id)
    if stored is not None and stored.kind != kind:
        stored = None  # a trace id reused for another kind of trace: the newer line wins
    request = raw if half == "request" else (stored.request if stored else None)
    response = raw if half == "response" else (stored.response if stored else None)
    first_time = min(when, stored.first_time) if stored and stored.first_time is not None else when
    trace = PartialTrace(trace_id, kind, request, response, eval_mode or bool(stored and stored.eval_mode), first_time)
    if request is None or response is None:
        put_partial_trace(conn, trace, now)
        return Parsed(PENDING, trace_id=trace_id)
    delete_partial_trace(conn, trace_id)
    joined = _join_generate(trace) if kind == "generate" else _join_execute(trace)
    joined.trace_id = trace_id
    return joined


def _validate_half(obj: dict[str, Any], kind: str, half: str) -> None:
    if kind == "generate":
        container = check_type(obj["request"]["doc"], dict, "request.doc") if half == "request" else obj["response"]
        where = "request.doc" if half == "request" else "response"
        for i, block in enumerate(_blocks(container, where)):
            _block(block, f"{where}.blocks[{i}]")
    elif half == "request":
        _block(check_type(obj["request"]["block"], dict, "request.block"), "request.block")
        optional(obj, "blockId", str, "")
    else:
        _exit_code(obj["response"])


def _join_generate(trace: PartialTrace) -> Parsed:
    request = json.loads(trace.request or "{}")
    response = json.loads(trace.response or "{}")
    context = tuple(_block(b, "request.doc.blocks[]")[1] for b in _blocks(request["request"]["doc"], "request.doc"))
    when = parse_time(response.get("time"))
    events = []
    for raw in _blocks(response["response"], "response"):
        block_id, cell = _block(raw, "response.blocks[]")
        if block_id:
            events.append(
                BlockEvent(block_id, SOURCE, when, context=context, generated=cell, eval_mode=trace.eval_mode)
            )
    if not events:
        return Parsed(UNJOINABLE, reason="no_block_ids")
    return Parsed(EVENTS, events=events, joined=True)


def _join_execute(trace: PartialTrace) -> Parsed:
    request = json.loads(trace.request or "{}")
    response = json.loads(trace.response or "{}")
    block_id, cell = _block(request["request"]["block"], "request.block")
    block_id = block_id or request.get("blockId") or ""
    if not block_id:
        return Parsed(UNJOINABLE, reason="empty_block_id")
    executed = Cell("code", cell.text, cell.language)
    when = parse_time(response.get("time"))
    event = BlockEvent(
        block_id,
        SOURCE,
        when,
        executed=executed,
        exit_code=_exit_code(response["response"]),
        eval_mode=trace.eval_mode,
    )
    return Parsed(EVENTS, events=[event], joined=True)


def _blocks(container: dict[str, Any], where: str) -> list[dict[str, Any]]:
    blocks = optional(container, "blocks", list, [], where)
    for i, b in enumerate(blocks):
        check_type(b, dict, f"{where}.blocks[{i}]")
    return blocks


def _block(raw: dict[str, Any], where: str) -> tuple[str, Cell]:
    """A foyle ``v1alpha1.Block`` → (its id, the cell)."""
    block_id = optional(raw, "id", str, "", where)
    text = optional(raw, "contents", str, "", where)
    language = optional(raw, "language", str, "", where)
    kind = "code" if raw.get("kind") in _CODE_KINDS else "markup"
    return block_id, Cell(kind, text, language)


def _exit_code(response: dict[str, Any]) -> int | None:
    """The ``exitCode: N`` foyle's executor writes among the response's output items, or None."""
    code = None
    for i, output in enumerate(optional(response, "outputs", list, [], "response")):
        check_type(output, dict, f"response.outputs[{i}]")
        for j, item in enumerate(optional(output, "items", list, [], f"response.outputs[{i}]")):
            check_type(item, dict, f"response.outputs[{i}].items[{j}]")
            text = optional(item, "text_data", str, "", f"response.outputs[{i}].items[{j}]")
            match = _EXIT_CODE.match(text)
            if match:
                code = int(match.group(1))
    return code


def _log_event(obj: dict[str, Any]) -> Parsed:
    event = require(obj, "event", dict)
    event_type = optional(event, "type", str, "", "event") or optional(obj, "eventType", str, "")
    if event_type not in ("EXECUTE", "ACCEPTED", "REJECTED"):
        return Parsed(SKIPPED)
    when = parse_time(obj.get("time"))
    selected = optional(event, "selectedId", str, "", "event") or optional(obj, "selectedCellId", str, "")
    cells = optional(event, "cells", list, [], "event")
    for i, c in enumerate(cells):
        check_type(c, dict, f"event.cells[{i}]")
    if event_type == "EXECUTE":
        if not selected:
            return Parsed(UNJOINABLE, reason="missing_selected_id")
        for i, c in enumerate(cells):
            if _cell_id(c, f"event.cells[{i}]") != selected:
                continue
            if c.get("kind") not in _CODE_KINDS:
                return Parsed(UNJOINABLE, reason="not_a_code_cell")
            text = optional(c, "value", str, "", f"event.cells[{i}]")
            language = optional(c, "languageId", str, "", f"event.cells[{i}]")
            executed = Cell("code", text, language)
            event_out = BlockEvent(selected, SOURCE, when, executed=executed, exit_code=_runme_exit_code(c))
            return Parsed(EVENTS, events=[event_out])
        return Parsed(UNJOINABLE, reason="cell_not_found")
    ids = [cid for i, c in enumerate(cells) if (cid := _cell_id(c, f"event.cells[{i}]"))] or (
        [selected] if selected else []
    )
    if not ids:
        return Parsed(UNJOINABLE, reason="missing_selected_id")
    status = event_type.lower()
    return Parsed(EVENTS, events=[BlockEvent(i, SOURCE, when, suggestion_status=status) for i in ids])


def _cell_id(cell: dict[str, Any], where: str) -> str:
    """A runme cell's id: metadata ``runme.dev/id``, else ``id`` (foyle's ``converters.GetCellID``)."""
    metadata = optional(cell, "metadata", dict, {}, where)
    for key in ("runme.dev/id", "id"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _runme_exit_code(cell: dict[str, Any]) -> int | None:
    summary = cell.get("executionSummary")
    if not isinstance(summary, dict):
        return None
    success = summary.get("success")
    if isinstance(success, dict):  # a google.protobuf.BoolValue written as an object
        success = success.get("value")
    if isinstance(success, bool):
        return 0 if success else 1
    return None


READER = Reader("foyle", JSON_LINES, detect=is_foyle_line, parse=ingest_foyle_line, pending=count_partial_traces)
"""foyle's raw logs in the registry; its pending records are the half traces in ``foyle_traces``."""
