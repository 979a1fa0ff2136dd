"""OpenAI Codex CLI session rollouts → blocks: one block per shell command the agent ran.

Codex (github.com/openai/codex; samples from CLI 0.125.0 and Desktop 0.128.0-alpha.1) appends one JSONL
"rollout" per session to ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (``CODEX_HOME``
defaults to ``~/.codex``). Its definition is Codex's own Rust source (Apache-2.0):
``codex-rs/protocol/src/protocol.rs`` (``RolloutLine``, ``RolloutItem``, ``EventMsg``,
``ExecCommandEndEvent``), ``codex-rs/protocol/src/models.rs`` (``ResponseItem``,
``FunctionCallOutputPayload``), ``codex-rs/rollout/src/recorder.rs``; notes in
``../shared/peer-data/assistant-logs/codex/README.md``. Every line is ``{"timestamp": RFC 3339, "type":
<RolloutItem tag>, "payload": {…}}``; a line is taken as Codex's (:data:`READER`) when its ``type`` is one
of :data:`ITEM_TYPES` and its ``payload`` an object.

What is read (the rules of :mod:`learnerd.analyzer.sessions`):

``session_meta``
    The session's ``id`` (block ids are ``codex:<id>:<call_id>``) and ``cwd``. Only the file's first line
    names the session, so the reader keeps its state per file (``file_scoped``).
``turn_context``
    The turn's ``cwd``.
``event_msg`` ``user_message``
    The person's turn (``message``): the intent of the commands that follow. (The same text comes again
    as a ``response_item`` ``message`` of role ``user``, mixed with injected context: not read.)
``event_msg`` ``agent_message``
    The agent's plan (``message``).
``response_item`` ``function_call`` named ``exec_command`` (``arguments``: a JSON string with ``cmd``),
``shell`` or ``container.exec`` (``command``: an argv array); ``response_item`` ``local_shell_call``
(``action.command``)
    A suggested command, keyed by ``call_id``. An argv ``[shell, "-lc", line]`` is the line; another
    argv is joined with shell quoting.
``response_item`` ``function_call_output`` (same ``call_id``)
    The exit status in its ``output`` text, ``Process exited with code N`` (current ``exec_command``), or
    in a JSON string's ``metadata.exit_code`` (legacy ``shell``). An output that says the process is still
    running (``Process running with session ID N``) records nothing: its status comes with
    ``exec_command_end``.
``event_msg`` ``exec_command_end``
    ``call_id`` and ``exit_code``: the command ran (the Desktop app writes none; the output text then
    carries the status).

Only those fields are read (:func:`read_part`, the part the secret redactor sees): the session's base
instructions, the commands' outputs (but for the status header of a ``function_call_output``), reasoning
and every skipped item are never looked at.

Everything else (reasoning, ``write_stdin`` polls, ``apply_patch``, web searches, token counts, unknown
item types of newer versions) is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
from typing import Any

from learnerd.analyzer import sessions
from learnerd.analyzer.fields import MalformedLine, check_type, optional, parse_time, require
from learnerd.analyzer.reader import EVENTS, JSON_LINES, SKIPPED, Parsed, Reader, Record
from learnerd.store.assistant_sessions import Session, get_session, put_session

SOURCE = "codex"
ITEM_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
"""``RolloutItem``'s tags (codex-rs/protocol/src/protocol.rs)."""
SHELL_FUNCTIONS = ("exec_command", "shell", "container.exec")
_EXITED = re.compile(r"Process exited with code (-?\d+)")
_SHELLS = ("sh", "bash", "zsh", "dash", "fish")


def is_codex_line(record: Record) -> bool:
    """Whether a JSON line looks like a Codex rollout line (see the module docstring)."""
    return record.get("type") in ITEM_TYPES and isinstance(record.get("payload"), dict) and "timestamp" in record


# What parse_line reads of a payload, by (item type, payload type); other payloads: their type alone.
_READ_KEYS: dict[tuple[str, Any], tuple[str, ...]] = {
    ("session_meta", None): ("id", "cwd"),
    ("turn_context", None): ("cwd",),
    ("event_msg", "user_message"): ("message",),
    ("event_msg", "agent_message"): ("message",),
    ("event_msg", "exec_command_end"): ("call_id", "command", "exit_code"),
    ("response_item", "function_call"): ("name", "arguments", "call_id"),
    ("response_item", "local_shell_call"): ("action", "call_id", "id"),
    ("response_item", "function_call_output"): ("call_id", "output"),
}


def read_part(record: Record) -> Record:
    """The part of a rollout line :func:`parse_line` reads (:attr:`~learnerd.analyzer.reader.Reader.reads`):
    ``type``, ``timestamp`` and the payload's fields of :data:`_READ_KEYS`; of a ``function_call_output``'s
    text, only the header before ``Output:`` (a legacy JSON output is kept whole: its status is inside)."""
    item, payload = record["type"], record["payload"]
    kind = payload.get("type")
    key = (item, None) if item in ("session_meta", "turn_context") or not isinstance(kind, str) else (item, kind)
    read = {"type": kind} if "type" in payload else {}
    read.update((k, payload[k]) for k in _READ_KEYS.get(key, ()) if k in payload)
    if key == ("response_item", "function_call") and read.get("name") not in SHELL_FUNCTIONS:
        read.pop("arguments", None)
    if key == ("response_item", "function_call_output"):
        output = read.get("output")
        if isinstance(output, dict) and isinstance(output.get("content"), str):
            read["output"] = {**output, "content": _output_header(output["content"])}
        elif isinstance(output, str):
            read["output"] = _output_header(output)
    return {k: record[k] for k in ("type", "timestamp") if k in record} | {"payload": read}


def _output_header(output: str) -> str:
    """A shell function's output text up to its ``Output:`` line (whole when it has none or is JSON)."""
    if output.lstrip().startswith("{"):
        return output
    header, sep, _ = output.partition("\nOutput:")
    return header + sep


def parse_line(conn: sqlite3.Connection, record: Record, now: float, path: str) -> Parsed:
    """One rollout line of the file ``path`` → block events (the session's state kept in the store).

    Raises:
        MalformedLine: a line of a kind that matters with a missing or ill-typed field.
    """
    item, payload = record["type"], record["payload"]
    kind = payload.get("type")
    when = parse_time(record.get("timestamp"), "timestamp")
    session = get_session(conn, SOURCE, path)
    if not session.session_id:
        session.session_id = os.path.basename(path)
    if item == "session_meta":
        session.session_id = require(payload, "id", str, "payload")
        session.cwd = optional(payload, "cwd", str, session.cwd, "payload")
        put_session(conn, session, now)
        return Parsed(SKIPPED)
    if item == "turn_context":
        session.cwd = optional(payload, "cwd", str, session.cwd, "payload")
        put_session(conn, session, now)
        return Parsed(SKIPPED)
    if item == "event_msg" and kind == "user_message":
        sessions.note_intent(conn, session, require(payload, "message", str, "payload"), when, now)
        return Parsed(SKIPPED)
    if item == "event_msg" and kind == "agent_message":
        sessions.note_plan(conn, session, require(payload, "message", str, "payload"), now)
        return Parsed(SKIPPED)
    if item == "event_msg" and kind == "exec_command_end":
        block_id = _block_id(session, require(payload, "call_id", str, "payload"))
        command = sessions.suggested_command(conn, block_id) or _argv_line(
            optional(payload, "command", list, [], "payload")
        )
        exit_code = require(payload, "exit_code", int, "payload")
        return _events(sessions.ran(conn, session, block_id, SOURCE, command, exit_code, when, now))
    if item != "response_item":
        return Parsed(SKIPPED)
    if kind == "function_call" and payload.get("name") in SHELL_FUNCTIONS:
        command = _function_command(require(payload, "arguments", (str, dict), "payload"))
        block_id = _block_id(session, require(payload, "call_id", str, "payload"))
        return _events(sessions.suggested(session, block_id, SOURCE, command, when))
    if kind == "local_shell_call":
        action = require(payload, "action", dict, "payload")
        command = _argv_line(require(action, "command", list, "payload.action"))
        call_id = optional(payload, "call_id", str, "", "payload") or optional(payload, "id", str, "", "payload")
        if not call_id:
            raise MalformedLine("a local_shell_call needs a 'call_id' or an 'id'")
        return _events(sessions.suggested(session, _block_id(session, call_id), SOURCE, command, when))
    if kind == "function_call_output":
        block_id = _block_id(session, require(payload, "call_id", str, "payload"))
        suggested = sessions.suggested_command(conn, block_id)
        if suggested is None:
            return Parsed(SKIPPED)  # the output of another function
        exit_code = _output_exit_code(payload.get("output"))
        if exit_code is None:
            return Parsed(SKIPPED)  # still running: exec_command_end (or nothing) says how it ended
        return _events(sessions.ran(conn, session, block_id, SOURCE, suggested, exit_code, when, now))
    return Parsed(SKIPPED)


def _events(*events: Any) -> Parsed:
    return Parsed(EVENTS, list(events))


def _block_id(session: Session, call_id: str) -> str:
    if not call_id:
        raise MalformedLine("field 'payload.call_id' is empty")
    return f"{SOURCE}:{session.session_id}:{call_id}"


def _function_command(arguments: str | dict[str, Any]) -> str:
    """A shell function call's ``arguments`` (a JSON string, or an object) → the command line."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise MalformedLine(f"field 'payload.arguments' is not JSON: {exc}") from exc
    args = check_type(arguments, dict, "payload.arguments")
    if isinstance(args.get("cmd"), str):
        return args["cmd"]
    return _argv_line(require(args, "command", list, "payload.arguments"))


def _argv_line(argv: list[Any]) -> str:
    """An argv → the command line: ``[shell, "-lc", line]`` is ``line``, another argv is shell-quoted."""
    for i, arg in enumerate(argv):
        check_type(arg, str, f"command[{i}]")
    if not argv:
        raise MalformedLine("an empty command")
    if len(argv) == 3 and os.path.basename(argv[0]) in _SHELLS and argv[1] in ("-lc", "-c"):
        return argv[2]
    return shlex.join(argv)


def _output_exit_code(output: Any) -> int | None:
    """The exit status in a ``function_call_output``'s ``output``: the ``Process exited with code N`` text,
    or the ``metadata.exit_code`` of a JSON string (legacy ``shell``); None when it says none."""
    if isinstance(output, dict):  # FunctionCallOutputPayload written as an object
        output = output.get("content", "")
    if not isinstance(output, str):
        return None
    match = _EXITED.search(output.split("\nOutput:", 1)[0])  # the header, not the command's own output
    if match:
        return int(match.group(1))
    if output.lstrip().startswith("{"):
        try:
            decoded = json.loads(output)
        except ValueError:
            return None
        metadata = decoded.get("metadata") if isinstance(decoded, dict) else None
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None
    return None


READER = Reader("codex", JSON_LINES, detect=is_codex_line, parse=parse_line, file_scoped=True, reads=read_part)
"""Codex CLI rollouts in the registry (state per file: the session is named in its first line)."""
