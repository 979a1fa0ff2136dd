"""OpenTelemetry GenAI spans, exported as OTLP/JSON → blocks: one block per shell command a tool ran.

The OpenTelemetry semantic conventions for generative AI (open-telemetry/semantic-conventions
``docs/gen-ai/gen-ai-spans.md``, ``gen-ai-agent-spans.md`` and the JSON schemas
``gen-ai-input-messages.json`` / ``gen-ai-output-messages.json`` @ 7b0c0fe1e6d7, Apache-2.0; since then in
open-telemetry/semantic-conventions-genai) are what instrumentation libraries (OpenLLMetry, OpenInference,
the OpenAI Agents SDK, …) emit. learnerd reads them as the OpenTelemetry Collector's file exporter writes
them: one OTLP/JSON ``ExportTraceServiceRequest`` per line (``{"resourceSpans": [{"scopeSpans": [{"spans":
[…]}]}]}``, the protobuf JSON mapping: ids in hex, times ``startTimeUnixNano`` as strings, attributes as
``{"key", "value": AnyValue}``). A line is taken as OTLP traces (:data:`READER`) when it has a
``resourceSpans`` array.

What is read, span by span in start-time order (the rules of :mod:`learnerd.analyzer.sessions`); a span's
session is its ``gen_ai.conversation.id``, else its trace:

``gen_ai.input.messages`` (a ``chat`` or ``invoke_agent`` span; an array of ``{role, parts}`` messages,
as a JSON string or a structured ``arrayValue``)
    The text parts of its last ``user`` message: the person's turn. Every model call of a turn repeats the
    conversation, so only a text that differs from the session's current intent starts a new turn.
``gen_ai.output.messages``
    Text parts: the assistant's plan. ``tool_call`` parts whose ``arguments`` name a command (a ``command``
    or ``cmd`` string, or an argv array): suggested commands, block id ``otel:<session>:<part id>``.
``execute_tool`` spans (``gen_ai.operation.name``)
    ``gen_ai.tool.call.arguments`` (same shapes) is the command that ran, ``gen_ai.tool.call.id`` its block;
    the conventions define no exit code: a span status ``STATUS_CODE_ERROR`` (2) is a failure (exit status
    1), any other status success (0). A tool call without a command (not a shell tool) is not read.

Spans of other operations, and lines without GenAI spans, are skipped.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
from typing import Any

from learnerd.analyzer import sessions
from learnerd.analyzer.fields import MalformedLine, check_type, optional
from learnerd.analyzer.reader import EVENTS, JSON_LINES, SKIPPED, Parsed, Reader, Record
from learnerd.store.assistant_sessions import get_session
from learnerd.store.blocks import BlockEvent

SOURCE = "otel"
STATUS_CODE_ERROR = 2
"""``Status.StatusCode`` ``STATUS_CODE_ERROR`` (opentelemetry-proto trace/v1/trace.proto)."""
_STATUS_NAMES = {"STATUS_CODE_ERROR": STATUS_CODE_ERROR}


def is_otlp_traces(record: Record) -> bool:
    """Whether a JSON line is an OTLP/JSON trace export (a ``resourceSpans`` array)."""
    return isinstance(record.get("resourceSpans"), list)


def any_value(value: Any, where: str) -> Any:
    """An OTLP/JSON ``AnyValue`` → its Python value (int64s arrive as decimal strings, by the JSON mapping).

    Raises:
        MalformedLine: not an ``AnyValue`` object.
    """
    check_type(value, dict, where)
    if "stringValue" in value:
        return check_type(value["stringValue"], str, f"{where}.stringValue")
    if "intValue" in value:
        raw = value["intValue"]
        try:
            return int(raw)
        except (TypeError, ValueError) as exc:
            raise MalformedLine(f"field '{where}.intValue' is not an integer") from exc
    if "boolValue" in value:
        return check_type(value["boolValue"], bool, f"{where}.boolValue")
    if "doubleValue" in value:
        return check_type(value["doubleValue"], (int, float, str), f"{where}.doubleValue")
    if "arrayValue" in value:
        values = optional(check_type(value["arrayValue"], dict, where), "values", list, [], where)
        return [any_value(v, f"{where}.values[{i}]") for i, v in enumerate(values)]
    if "kvlistValue" in value:
        return _attributes(optional(check_type(value["kvlistValue"], dict, where), "values", list, [], where), where)
    return None  # an empty AnyValue, or bytesValue: nothing learnerd reads


def _attributes(raw: list[Any], where: str) -> dict[str, Any]:
    out = {}
    for i, kv in enumerate(raw):
        check_type(kv, dict, f"{where}[{i}]")
        key = check_type(kv.get("key"), str, f"{where}[{i}].key")
        out[key] = any_value(kv.get("value", {}), f"{where}[{i}].value")
    return out


def _spans(record: Record) -> list[dict[str, Any]]:
    spans = []
    for i, rs in enumerate(record["resourceSpans"]):
        check_type(rs, dict, f"resourceSpans[{i}]")
        for j, ss in enumerate(optional(rs, "scopeSpans", list, [], f"resourceSpans[{i}]")):
            check_type(ss, dict, f"resourceSpans[{i}].scopeSpans[{j}]")
            for k, span in enumerate(optional(ss, "spans", list, [], f"resourceSpans[{i}].scopeSpans[{j}]")):
                spans.append(check_type(span, dict, f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"))
    return spans


def _start(span: dict[str, Any]) -> float:
    raw = span.get("startTimeUnixNano", 0)
    try:
        nanos = int(raw)
    except (TypeError, ValueError) as exc:
        raise MalformedLine("field 'startTimeUnixNano' is not an integer") from exc
    if nanos < 0:
        raise MalformedLine("field 'startTimeUnixNano' is negative")
    return nanos / 1e9


def parse_export(conn: sqlite3.Connection, record: Record, now: float) -> Parsed:
    """One OTLP/JSON trace export → block events (each conversation's intent and plan kept in the store).

    Raises:
        MalformedLine: an ill-typed span, attribute or message.
    """
    timed = sorted(((_start(s), s) for s in _spans(record)), key=lambda pair: pair[0])
    events: list[BlockEvent] = []
    for when, span in timed:
        attrs = _attributes(optional(span, "attributes", list, [], "span"), "span.attributes")
        operation = attrs.get("gen_ai.operation.name")
        if not isinstance(operation, str):
            continue
        key = attrs.get("gen_ai.conversation.id") or optional(span, "traceId", str, "", "span")
        if not isinstance(key, str) or not key:
            raise MalformedLine("a GenAI span without gen_ai.conversation.id or traceId")
        session = get_session(conn, SOURCE, key)
        session.session_id = key
        if operation == "execute_tool":
            command = _command(attrs.get("gen_ai.tool.call.arguments"))
            if command is None:
                continue
            call_id = attrs.get("gen_ai.tool.call.id") or optional(span, "spanId", str, "", "span")
            block_id = f"{SOURCE}:{key}:{call_id}"
            status = optional(span, "status", dict, {}, "span")
            code = status.get("code")
            failed = _STATUS_NAMES.get(code, code) == STATUS_CODE_ERROR
            events.append(sessions.suggested(session, block_id, SOURCE, command, when))
            events.append(sessions.ran(conn, session, block_id, SOURCE, command, 1 if failed else 0, when, now))
            continue
        intent = _last_user_text(_messages(attrs.get("gen_ai.input.messages"), "gen_ai.input.messages"))
        if intent and intent != session.intent:
            sessions.note_intent(conn, session, intent, when, now)
        for message in _messages(attrs.get("gen_ai.output.messages"), "gen_ai.output.messages"):
            for part in _parts(message):
                if part.get("type") == "text" and isinstance(part.get("content"), str):
                    sessions.note_plan(conn, session, part["content"], now)
                elif part.get("type") == "tool_call" and isinstance(part.get("id"), str) and part["id"]:
                    command = _command(part.get("arguments"))
                    if command is not None:
                        block_id = f"{SOURCE}:{key}:{part['id']}"
                        events.append(sessions.suggested(session, block_id, SOURCE, command, when))
    return Parsed(EVENTS, events) if events else Parsed(SKIPPED)


def _messages(value: Any, name: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise MalformedLine(f"attribute {name!r} is not JSON: {exc}") from exc
    messages = check_type(value, list, name)
    for i, message in enumerate(messages):
        check_type(message, dict, f"{name}[{i}]")
    return messages


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in optional(message, "parts", list, [], "message") if isinstance(p, dict)]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            parts = _parts(message)
            texts = [p["content"] for p in parts if p.get("type") == "text" and isinstance(p.get("content"), str)]
            if texts:
                return "\n".join(texts).strip()
    return ""


def _command(arguments: Any) -> str | None:
    """A tool call's arguments → the shell command they name, or None (not a shell tool)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    for key in ("command", "cmd"):
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value[2] if len(value) == 3 and value[1] in ("-c", "-lc") else shlex.join(value)
    return None


READER = Reader("otel-genai", JSON_LINES, detect=is_otlp_traces, parse=parse_export)
"""OTLP/JSON trace exports with GenAI spans in the registry."""
