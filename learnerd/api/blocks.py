"""``POST /v1/blocks`` on the RPC listener: an assistant logs block-log events over HTTP.

The body is learnerd block-log events (version 1, ``docs/block-log-format.md``; the parser is
:func:`learnerd.analyzer.blocklog.parse_event`), either a JSON array of event objects or JSON lines (one
event object per line, blank lines skipped; ``Content-Type`` is not looked at: a body whose first
non-blank byte is ``[`` is an array)::

    POST /v1/blocks
    Authorization: Bearer <token>        # $LEARNERD_PROBE_TOKEN, the token of inject_probe
    [{"learnerd": 1, "type": "context", "block_id": "b-7f3a", "time": 1714564800.0,
      "cells": [{"kind": "markup", "text": "List the pods in the dev namespace"}]},
     {"learnerd": 1, "type": "executed", "block_id": "b-7f3a", "time": 1714564809.5,
      "cell": {"kind": "code", "language": "bash", "text": "kubectl get pods -n dev"}, "exit_code": 0}]

Each event is validated as the analyzer validates a log line: a JSON object with the ``learnerd`` key that
:func:`~learnerd.analyzer.blocklog.parse_event` accepts (a malformed event and an unknown one — a ``type``
or version this learnerd does not read — are both refused here, where the analyzer would count and skip
them), whose line is at most ``[analyzer] max_line_bytes``, whose ``time`` is at most a day after the server's
clock (:func:`learnerd.store.blocks.check_time`: a later time would pin the block's cells), and that every store
backend can keep (an
``exit_code`` within a signed 64-bit integer, no NUL character in an id or a cell: PostgreSQL refuses
those, and the analyzer would count the line malformed there). A request is all or nothing: the first bad
event refuses the whole request, and nothing of it is written.

Answers (``{"error": …}`` bodies, as every RPC answer): **401** without the bearer token; **413** over
the listener's 64 KiB; **408** a body slower than the body deadline; **400** an empty body, a body that
is not JSON (or hostile JSON, :mod:`learnerd.api.json_body`: in a JSON array it refuses the body as a whole,
without an index), or a bad event — ``{"error": "event <i>: <reason>", "index": <i>}``, ``i`` counting
events from 0 (blank lines are not events; a JSON line that is not JSON is a bad event); **503** the
events could not be made durable (disk full, I/O error: retry); **200** ``{"accepted": <events>,
"block_ids": [<the blocks they are about, in order of first mention>]}``, sent only after the events are
fsynced in ``<state_dir>/ingest/`` (:mod:`learnerd.store.ingest_log`).

Durability: an accepted event is one line appended to learnerd's own block-log file, which the analyzer
tails like a file of ``log_dirs`` (watermarked, crash-safe): the HTTP path and the file path end in the
same intake, with the same counters, and the block becomes an example once the analyzer has read the line
(it watches the directory). Requests are counted in ``learnerd_rpc_block_requests_total``
(label ``outcome``: accepted, invalid, unauthorized, too_large, timeout, unavailable, error) and accepted
events in ``learnerd_rpc_block_events_total``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from learnerd.analyzer.blocklog import is_block_log, parse_event
from learnerd.analyzer.fields import MalformedLine, UnknownEvent
from learnerd.api.errors import BadRequest, ControlError, Unavailable
from learnerd.api.http import json_response, read_body
from learnerd.api.json_body import parse_json_body
from learnerd.privacy.redact import Redactor
from learnerd.store.blocks import BlockEvent, BlockRefused, check_time
from learnerd.store.ingest_log import IngestLog

BLOCKS_PATH = "/v1/blocks"
INT64 = range(-(2**63), 2**63)
"""The exit codes every store backend keeps (SQLite's INTEGER, PostgreSQL's BIGINT)."""

_OUTCOMES = {400: "invalid", 401: "unauthorized", 408: "timeout", 413: "too_large", 503: "unavailable"}


def parse_events(
    body: bytes,
    *,
    max_line_bytes: int,
    redactor: Redactor | None = None,
    redacted: Counter[str] | None = None,
    now: float | None = None,
) -> tuple[list[bytes], list[str]]:
    """The block-log lines of a ``POST /v1/blocks`` body, each validated as the module docstring says, and
    the ids of the blocks they are about (in order of first mention). With a ``redactor`` every string of an
    event is redacted before its line is made (nothing posted reaches the disk with a secret in it); the
    placeholders put in are counted into ``redacted``. ``now``: the clock events are checked against (epoch
    seconds; default: now).

    Returns:
        ``(lines, block_ids)``: each line is the event's JSON object, compact, UTF-8, ending in LF.

    Raises:
        BadRequest: an empty body or one without events, a body that is not a JSON array or JSON lines
            (:func:`~learnerd.api.json_body.parse_json_body`'s limits), or a bad event (its ``index``
            field is the event's position, from 0).
    """
    text = body.strip()
    if not text:
        raise BadRequest("empty body: send a JSON array of block-log events, or one event per line")
    if text.startswith(b"["):
        events = parse_json_body(body)
    else:
        events = [_json_line(index, raw) for index, raw in enumerate(r for r in body.split(b"\n") if r.strip())]
    if not isinstance(events, list) or not events:
        raise BadRequest("no events: send a JSON array of block-log events, or one event per line")
    lines: list[bytes] = []
    block_ids: dict[str, None] = {}
    now = time.time() if now is None else now
    for index, obj in enumerate(events):
        event = _event(index, obj, now)
        if redactor is not None:
            obj = redactor.redact_json(obj, redacted)
        line = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        if len(line) - 1 > max_line_bytes:
            raise _bad(index, f"its line is {len(line) - 1} bytes, over [analyzer] max_line_bytes ({max_line_bytes})")
        lines.append(line)
        block_ids[event.block_id] = None
    return lines, list(block_ids)


def _json_line(index: int, raw: bytes) -> Any:
    try:
        return parse_json_body(raw)
    except BadRequest as exc:
        raise _bad(index, str(exc)) from None


def _event(index: int, obj: Any, now: float) -> BlockEvent:
    """``obj`` parsed as the analyzer parses a block-log line, and checked to be storable on every backend."""
    if not isinstance(obj, dict):
        raise _bad(index, "not a JSON object")
    if not is_block_log(obj):
        raise _bad(index, "not a block-log event (it has no 'learnerd' key; see docs/block-log-format.md)")
    try:
        event = parse_event(obj)
    except UnknownEvent as exc:
        raise _bad(index, f"unknown event: {exc}") from None
    except MalformedLine as exc:
        raise _bad(index, f"malformed: {exc}") from None
    try:
        check_time(event.time, now)
    except BlockRefused as exc:
        raise _bad(index, f"refused: {exc}") from None
    if event.exit_code is not None and event.exit_code not in INT64:
        raise _bad(index, "malformed: field 'exit_code' is outside a signed 64-bit integer")
    cells = [*(event.context or ()), *(c for c in (event.generated, event.executed) if c is not None)]
    if any("\0" in text for text in (event.block_id, *(t for c in cells for t in (c.text, c.language)))):
        raise _bad(index, "malformed: a NUL character (U+0000) in block_id or a cell, which PostgreSQL cannot store")
    return event


def _bad(index: int, reason: str) -> BadRequest:
    return BadRequest(f"event {index}: {reason}", index=index)


class BlocksEndpoint:
    """The handler of ``POST /v1/blocks``: validate, append to ``log`` (fsynced), answer, count.

    Args:
        log: the ingest log the analyzer tails (its directory must be one of the analyzer's log directories).
        max_line_bytes: ``[analyzer] max_line_bytes``: an event whose line is longer is refused (400).
        registry: where the counters go; None keeps them private.
        redactor: replaces secrets in every event before it is written (:mod:`learnerd.privacy.redact`).
        on_redacted: also told the placeholders put in, by kind (the daemon's count of every intake).
    """

    def __init__(
        self,
        log: IngestLog,
        *,
        max_line_bytes: int,
        registry: CollectorRegistry | None = None,
        redactor: Redactor | None = None,
        on_redacted: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        self._log = log
        self._on_redacted = on_redacted
        self._max_line_bytes = max_line_bytes
        self._redactor = redactor
        self.redactions = PromCounter(
            "learnerd_rpc_block_redactions",
            "Secrets replaced by typed placeholders in events posted to /v1/blocks.",
            ["kind"],
            registry=registry,
        )
        self.requests = PromCounter(
            "learnerd_rpc_block_requests",
            "POST /v1/blocks requests by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.events = PromCounter(
            "learnerd_rpc_block_events", "Block-log events accepted over HTTP (durable).", registry=registry
        )

    async def handle(self, request: web.Request, authorize: Callable[[web.Request], None]) -> web.Response:
        """Answer one request; ``authorize(request)`` raises :class:`~learnerd.api.errors.Unauthorized` for a
        missing or wrong token.

        Raises:
            ControlError: the refusals of the module docstring (the error middleware answers them).
        """
        try:
            authorize(request)
            redacted: Counter[str] = Counter()
            lines, block_ids = parse_events(
                await read_body(request),
                max_line_bytes=self._max_line_bytes,
                redactor=self._redactor,
                redacted=redacted,
            )
            try:
                await anyio.to_thread.run_sync(self._log.append, lines)
            except OSError as exc:
                raise Unavailable(f"events not accepted (not written): {exc}") from None
        except ControlError as exc:
            self.requests.labels(_OUTCOMES.get(exc.status, "invalid")).inc()
            raise
        except Exception:
            self.requests.labels("error").inc()
            raise
        self.requests.labels("accepted").inc()
        for kind, n in redacted.items():
            self.redactions.labels(kind).inc(n)
        if redacted and self._on_redacted is not None:
            self._on_redacted(redacted)
        self.events.inc(len(lines))
        return json_response({"accepted": len(lines), "block_ids": block_ids})
