"""Claude Code session transcripts → blocks: one block per ``Bash`` tool call.

Claude Code (Anthropic's terminal coding assistant, closed source; samples from version 1.0.98) writes
one JSONL file per session under ``~/.claude/projects/<working directory, / replaced by ->/<session
uuid>.jsonl``. The format, as public parsers read it (d-kimuson/claude-code-viewer
``src/lib/conversation-schema/``, simonw/claude-code-transcripts; see
``../shared/peer-data/assistant-logs/claude-code/README.md``): one JSON object per line with ``type``,
``uuid``, ``parentUuid``, ``sessionId``, ``cwd``, ``timestamp`` (RFC 3339), ``isSidechain`` (a sub-agent's
line) and, for ``user`` and ``assistant`` lines, the API ``message``. A line is taken as Claude Code's
(:data:`READER`) when it has a string ``sessionId`` and a string ``type`` (or is a ``summary`` line, which
names a ``leafUuid`` instead).

What is read (the rules of :mod:`learnerd.analyzer.sessions`):

``user`` line whose ``message.content`` is a string or holds ``text`` parts
    The person's turn: the intent of the commands that follow. Skipped: ``isMeta`` lines and the
    slash-command wrappers (text starting with ``<command-name>``, ``<command-message>``,
    ``<local-command-stdout>``).
``assistant`` line with ``message.content[]`` parts
    ``text`` parts are the assistant's plan; a ``tool_use`` part with ``name: "Bash"`` is a suggested
    command, ``input.command``; its block id is ``claude-code:<sessionId>:<tool_use id>``.
``user`` line with ``tool_result`` parts
    The result of the tool call ``tool_use_id`` (results of other tools are ignored): the command ran, with
    exit status 0 unless ``is_error`` is true; then the code in an ``Exit code N`` first line of the content
    (newer versions), else 1 (1.0.x writes only the stderr text). ``toolUseResult.interrupted`` (the person
    pressed Esc) is 130. A result that says the person refused the call (``The user doesn't want to
    proceed``) makes the block a rejected suggestion; one that holds ``<tool_use_error>`` (the call was
    refused before it ran, e.g. a bad parameter) records nothing.

Only those fields are read (:func:`read_part`, the part the secret redactor sees): the ``input`` of other
tools, ``toolUseResult``'s outputs, usage, thinking parts, and the text of a tool result past its first
:data:`RESULT_CHARS` characters (where its status is said) are never looked at.

A sub-agent's lines (``isSidechain: true``) are a session of their own (the ``Task`` prompt is its
intent). Every other line type (``summary``, ``file-history-snapshot``, ``progress``, …) is skipped.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from learnerd.analyzer import sessions
from learnerd.analyzer.fields import MalformedLine, check_type, optional, parse_time, require
from learnerd.analyzer.reader import EVENTS, JSON_LINES, SKIPPED, Parsed, Reader, Record
from learnerd.store.assistant_sessions import Session, get_session
from learnerd.store.blocks import BlockEvent

SOURCE = "claude-code"
SHELL_TOOL = "Bash"
_WRAPPERS = ("<command-name>", "<command-message>", "<local-command-stdout>")
_DENIED = "The user doesn't want to proceed"
_TOOL_USE_ERROR = "<tool_use_error>"
_EXIT_CODE = re.compile(r"\AExit code (-?\d+)")
_LINE_KEYS = ("type", "sessionId", "timestamp", "isSidechain", "cwd", "isMeta")
RESULT_CHARS = 1000
"""How much of a tool result's text is read: enough for its status (``Exit code N``, a denial, a
``<tool_use_error>``); the command's output is not learned."""
INTERRUPTED_EXIT_CODE = 130
"""The exit status of a command the person interrupted (the shell's 128 + SIGINT)."""


def is_claude_code_line(record: Record) -> bool:
    """Whether a JSON line looks like a Claude Code transcript line (see the module docstring)."""
    if isinstance(record.get("sessionId"), str) and isinstance(record.get("type"), str):
        return True
    return record.get("type") == "summary" and "leafUuid" in record


def block_id_of(session_id: str, tool_use_id: str) -> str:
    """The block id of a Claude Code tool call."""
    return f"{SOURCE}:{session_id}:{tool_use_id}"


def read_part(record: Record) -> Record:
    """The part of a transcript line :func:`parse_line` reads (:attr:`~learnerd.analyzer.reader.Reader.reads`):
    the line's own keys above, ``toolUseResult.interrupted``, and ``message.content`` with each part cut to
    what is read of it."""
    if record.get("type") not in ("user", "assistant"):
        return {"type": record.get("type")}
    part: Record = {k: record[k] for k in _LINE_KEYS if k in record}
    tool_use_result = record.get("toolUseResult")
    if isinstance(tool_use_result, dict) and "interrupted" in tool_use_result:
        part["toolUseResult"] = {"interrupted": tool_use_result["interrupted"]}
    message = record.get("message")
    if isinstance(message, dict):
        part["message"] = {}
        if "content" in message:
            content = message["content"]
            part["message"]["content"] = (
                [_read_content_part(p) for p in content] if isinstance(content, list) else content
            )
    elif "message" in record:
        part["message"] = message
    return part


def _read_content_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return {k: part[k] for k in ("type", "text") if k in part}
    if kind == "tool_use":
        if part.get("name") != SHELL_TOOL:
            return {"type": kind, "name": part.get("name")}
        read = {k: part[k] for k in ("type", "id", "name") if k in part}
        tool_input = part.get("input")
        if isinstance(tool_input, dict):
            read["input"] = {"command": tool_input["command"]} if "command" in tool_input else {}
        elif "input" in part:
            read["input"] = tool_input
        return read
    if kind == "tool_result":
        read = {k: part[k] for k in ("type", "tool_use_id", "is_error") if k in part}
        read["content"] = _text_of(part.get("content"))[:RESULT_CHARS]
        return read
    return {"type": kind}


def parse_line(conn: sqlite3.Connection, record: Record, now: float) -> Parsed:
    """One transcript line → block events (the session's intent and plan kept in the store).

    Raises:
        MalformedLine: a ``user`` or ``assistant`` line with a missing or ill-typed field.
    """
    kind = record.get("type")
    if kind not in ("user", "assistant"):
        return Parsed(SKIPPED)
    session_id = require(record, "sessionId", str)
    if not session_id:
        raise MalformedLine("field 'sessionId' is empty")
    when = parse_time(record.get("timestamp"), "timestamp")
    message = require(record, "message", dict)
    content = message.get("content")
    key = f"{session_id}/sidechain" if optional(record, "isSidechain", bool, False) else session_id
    session = get_session(conn, SOURCE, key)
    session.session_id = session_id
    session.cwd = optional(record, "cwd", str, session.cwd)
    if isinstance(content, str):
        parts: list[dict[str, Any]] = [{"type": "text", "text": content}]
    else:
        parts = check_type(content, list, "message.content")
        for i, part in enumerate(parts):
            check_type(part, dict, f"message.content[{i}]")
    if kind == "user":
        events = _user(conn, record, session, parts, when, now)
    else:
        events = _assistant(conn, session, parts, when, now)
    return Parsed(EVENTS, events) if events else Parsed(SKIPPED)


def _user(
    conn: sqlite3.Connection, record: Record, session: Session, parts: list[dict[str, Any]], when: float, now: float
) -> list[BlockEvent]:
    results = [p for p in parts if p.get("type") == "tool_result"]
    if not results:
        text = "\n".join(require(p, "text", str, "message.content[]") for p in parts if p.get("type") == "text")
        if text.strip() and not optional(record, "isMeta", bool, False) and not text.lstrip().startswith(_WRAPPERS):
            sessions.note_intent(conn, session, text, when, now)
        return []
    events = []
    tool_use_result = record.get("toolUseResult")
    interrupted = isinstance(tool_use_result, dict) and tool_use_result.get("interrupted") is True
    for part in results:
        block_id = block_id_of(session.session_id, require(part, "tool_use_id", str, "tool_result"))
        command = sessions.suggested_command(conn, block_id)
        if command is None:
            continue  # the result of another tool
        output = _text_of(part.get("content"))
        if _TOOL_USE_ERROR in output:
            continue
        if output.startswith(_DENIED):
            events.append(sessions.denied(block_id, SOURCE, when))
            continue
        is_error = optional(part, "is_error", bool, False, "tool_result")
        match = _EXIT_CODE.match(output)
        if interrupted:
            code = INTERRUPTED_EXIT_CODE
        elif not is_error:
            code = 0
        else:
            code = int(match.group(1)) if match and int(match.group(1)) != 0 else 1
        events.append(sessions.ran(conn, session, block_id, SOURCE, command, code, when, now))
    return events


def _assistant(
    conn: sqlite3.Connection, session: Session, parts: list[dict[str, Any]], when: float, now: float
) -> list[BlockEvent]:
    events = []
    for part in parts:
        if part.get("type") == "text":
            sessions.note_plan(conn, session, optional(part, "text", str, "", "message.content[]"), now)
        elif part.get("type") == "tool_use" and part.get("name") == SHELL_TOOL:
            tool_input = require(part, "input", dict, "tool_use")
            command = require(tool_input, "command", str, "tool_use.input")
            block_id = block_id_of(session.session_id, require(part, "id", str, "tool_use"))
            events.append(sessions.suggested(session, block_id, SOURCE, command, when))
    return events


def _text_of(content: Any) -> str:
    """A tool result's content as text: a string, or the ``text`` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


READER = Reader("claude-code", JSON_LINES, detect=is_claude_code_line, parse=parse_line, reads=read_part)
"""Claude Code transcripts in the registry."""
