"""Hypothesis strategies for hostile log lines, shared by the property test and ``benchmarks/fuzz_log_lines.py``.

A line is bytes without its LF: arbitrary bytes, or the JSON text of an arbitrary JSON value (big
integers, lone surrogate escapes, nesting deeper than Python's recursion limit), or an object shaped
like a block-log event, a foyle line, a Claude Code transcript line, a Codex rollout line or an OTLP/JSON
trace export whose fields hold arbitrary JSON. :func:`check_file` writes them between good lines, ingests
the file with a real analyzer and checks that every good line was ingested and every hostile line was
accounted for exactly once. :data:`atuin_rows` and :func:`check_history` do the same for rows of atuin's
``history.db`` (SQLite stores any value in any column, so a hostile row has values of any type).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.stats import AnalyzerStats
from learnerd.store.blocks import Cell, list_block_ids

FOYLE_FUNCTIONS = (
    "github.com/jlewi/foyle/app/pkg/agent.(*Agent).Generate",
    "github.com/jlewi/foyle/app/pkg/executor.(*Executor).Execute",
    "github.com/jlewi/foyle/app/pkg/agent.(*Agent).LogEvents",
)

# every code point, lone surrogates included (json.dumps writes them as "\ud800" escapes)
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
big_ints = st.integers() | st.integers(min_value=2**63 - 2, max_value=2**63 + 2) | st.integers(min_value=2**64)
scalars = (
    st.none()
    | st.booleans()
    | big_ints
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_text
    | st.just(10**400)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=16,
)


def _cells(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    cell = st.fixed_dictionaries({"kind": st.sampled_from(["code", "markup"]) | children, "text": any_text | children})
    return cell | children


block_log_like = st.fixed_dictionaries(
    {
        "learnerd": st.just(1) | big_ints | json_values,
        "type": st.sampled_from(["context", "generated", "executed"]) | any_text,
        "block_id": any_text | json_values,
        "time": st.floats(min_value=0, max_value=4e9) | big_ints | any_text | json_values,
    },
    optional={
        "cells": st.lists(_cells(json_values), max_size=3) | json_values,
        "cell": _cells(json_values),
        "exit_code": big_ints | json_values,
        "eval_mode": json_values,
    },
)
foyle_like = st.fixed_dictionaries(
    {"message": any_text, "function": st.sampled_from(FOYLE_FUNCTIONS) | any_text},
    optional={
        "traceId": any_text | json_values,
        "time": st.floats(min_value=0, max_value=4e9) | json_values,
        "request": st.fixed_dictionaries({}, optional={"doc": json_values, "block": json_values}) | json_values,
        "response": st.fixed_dictionaries({}, optional={"blocks": json_values, "outputs": json_values}),
        "event": json_values,
        "evalMode": json_values,
    },
)
times = st.sampled_from(["2025-09-03T10:00:00Z", "2025-09-03T10:00:01.5+02:00"]) | st.floats(0, 4e9) | json_values
_ids = st.sampled_from(["t1", "t2"]) | any_text | json_values
_claude_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result"]) | any_text},
    optional={
        "text": any_text | json_values,
        "id": _ids,
        "name": st.just("Bash") | any_text,
        "input": st.fixed_dictionaries({}, optional={"command": any_text | json_values}) | json_values,
        "tool_use_id": _ids,
        "content": any_text | st.just("Exit code 3\nboom") | json_values,
        "is_error": json_values,
    },
)
claude_code_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "summary"]) | any_text, "sessionId": st.just("s1") | any_text},
    optional={
        "timestamp": times,
        "cwd": any_text | json_values,
        "isSidechain": json_values,
        "isMeta": json_values,
        "message": st.fixed_dictionaries({}, optional={"content": any_text | st.lists(_claude_part, max_size=3)})
        | json_values,
        "toolUseResult": json_values,
    },
)
_codex_payload = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["user_message", "agent_message", "exec_command_end", "function_call", "function_call_output"]
        )
        | any_text
    },
    optional={
        "id": any_text | json_values,
        "cwd": any_text | json_values,
        "message": any_text | json_values,
        "name": st.sampled_from(["exec_command", "shell"]) | any_text,
        "arguments": st.just('{"cmd": "ls"}') | st.just('{"command": ["bash", "-lc", "ls"]}') | any_text | json_values,
        "call_id": st.sampled_from(["c1", "c2"]) | json_values,
        "output": st.just("Process exited with code 1") | any_text | json_values,
        "exit_code": big_ints | json_values,
        "command": json_values,
        "action": json_values,
    },
)
codex_like = st.fixed_dictionaries(
    {
        "timestamp": times,
        "type": st.sampled_from(["session_meta", "response_item", "event_msg", "turn_context"]),
        "payload": _codex_payload,
    }
)
_any_value = st.fixed_dictionaries(
    {},
    optional={
        "stringValue": any_text | st.just('[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'),
        "intValue": any_text | big_ints | json_values,
        "arrayValue": json_values,
        "kvlistValue": json_values,
    },
)
_span = st.fixed_dictionaries(
    {},
    optional={
        "traceId": any_text | json_values,
        "spanId": any_text | json_values,
        "startTimeUnixNano": any_text | big_ints | json_values,
        "attributes": st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(
                        ["gen_ai.operation.name", "gen_ai.tool.call.arguments", "gen_ai.input.messages"]
                    )
                    | any_text,
                    "value": _any_value | json_values,
                }
            ),
            max_size=4,
        )
        | json_values,
        "status": json_values,
    },
)
_resource_spans = st.fixed_dictionaries(
    {}, optional={"scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(_span, max_size=3)}), max_size=2)}
)
otlp_like = st.fixed_dictionaries(
    {
        "resourceSpans": st.lists(
            _resource_spans | json_values,
            max_size=2,
        )
    }
)
deep_nesting = st.integers(min_value=500, max_value=20_000).map(lambda n: b"[" * n + b"]" * n)


def _dumps(value: Any, ensure_ascii: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


json_lines = st.builds(
    _dumps, json_values | block_log_like | foyle_like | claude_code_like | codex_like | otlp_like, st.booleans()
)
hostile_lines = (st.binary(max_size=64) | json_lines | deep_nesting).map(lambda b: b.replace(b"\n", b""))
"""One hostile line: bytes without LF."""


def good_line(n: int) -> bytes:
    """A valid block-log event for the block ``good-<n>`` (with its LF)."""
    return event_line("executed", f"good-{n}", 1.0, cell=Cell("code", "ls", "bash"), exit_code=0).encode()


def is_json_object(data: bytes) -> bool:
    """Whether ``data`` is, by itself, a JSON object as the analyzer reads one (strict: no NaN)."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return isinstance(json.loads(data, parse_constant=refuse), dict)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, too deep
        return False


def refused(stats: AnalyzerStats) -> int:
    """Lines the analyzer refused or set aside, whatever the counter."""
    set_aside = stats.skipped_lines + stats.pending_traces + sum(stats.unjoinable_traces.values())
    return stats.malformed_lines + stats.unknown_events + stats.oversized_lines + stats.foreign_lines + set_aside


async def check_file(analyzer: Analyzer, conn: Any, path: Path, bad: list[bytes], first_good: int) -> AnalyzerStats:
    """Write good, bad[0], good, bad[1], ..., good to ``path`` (a new file in a log directory), ingest
    it with ``analyzer`` and assert what must hold; return the stats before the file for the next call.

    Holds: no error, every line read, every good line's block present, every hostile line that is not
    a JSON object counted as malformed (the last one named with its line), and no hostile line counted
    more than once.
    """
    before = analyzer.stats
    data = bytearray(good_line(first_good))
    for i, line in enumerate(bad, start=1):
        data += line + b"\n" + good_line(first_good + i)
    path.write_bytes(bytes(data))
    after = await analyzer.sync()
    assert after.errors == before.errors, after.last_error
    assert after.lines_read - before.lines_read == 2 * len(bad) + 1
    ids = set(list_block_ids(conn))
    assert {f"good-{first_good + i}" for i in range(len(bad) + 1)} <= ids
    not_objects = [i for i, line in enumerate(bad) if line.strip() and not is_json_object(line)]
    malformed = after.malformed_lines - before.malformed_lines
    assert malformed >= len(not_objects)
    assert refused(after) - refused(before) <= sum(1 for line in bad if line.strip())
    if not_objects and malformed == len(not_objects):
        assert after.last_malformed is not None
        assert (after.last_malformed.file, after.last_malformed.line) == (str(path), 2 * not_objects[-1] + 2)
    return after


ATUIN_COLUMNS = ("id", "timestamp", "duration", "exit", "command", "cwd", "session", "hostname", "deleted_at")
ATUIN_SCHEMA = (
    "CREATE TABLE history (id TEXT PRIMARY KEY, timestamp INTEGER, duration INTEGER, exit INTEGER, command TEXT,"
    " cwd TEXT, session TEXT, hostname TEXT, deleted_at INTEGER)"
)
"""atuin's ``history`` table before its 2026 columns (crates/atuin-client/migrations @ 824c8716d82b), without
its NOT NULL constraints: what a hostile writer could leave."""
_sqlite_values = (
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    | st.binary(max_size=8)
)
atuin_rows = st.fixed_dictionaries({c: _sqlite_values for c in ATUIN_COLUMNS if c != "id"})
"""One hostile atuin row: any SQLite value in any column (its ``id`` is given by :func:`check_history`)."""


def _insert(db: sqlite3.Connection, row_id: str, row: dict[str, Any]) -> None:
    values = [row_id, *(row[c] for c in ATUIN_COLUMNS[1:])]
    db.execute(f"INSERT INTO history ({', '.join(ATUIN_COLUMNS)}) VALUES ({', '.join('?' * len(values))})", values)


def _good_row() -> dict[str, Any]:
    row = {"timestamp": 10**18, "duration": 1, "exit": 0, "command": "ls", "cwd": "/", "session": "s"}
    return row | {"hostname": "h:u", "deleted_at": None}


async def check_history(analyzer: Analyzer, conn: Any, path: Path, bad: list[dict[str, Any]], first: int) -> None:
    """Add good, bad[0], good, ... rows to the atuin database ``path`` (created with :data:`ATUIN_SCHEMA` if
    missing), ingest them with ``analyzer`` and assert: no error, every row read once, every good row's
    block present, no hostile row counted more than once."""
    with sqlite3.connect(path) as db:
        db.execute(ATUIN_SCHEMA.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        _insert(db, f"good-{first}", _good_row())
        for i, row in enumerate(bad, start=1):
            _insert(db, f"bad-{first}-{i}", row)
            _insert(db, f"good-{first + i}", _good_row())
    before = analyzer.stats
    after = await analyzer.sync()
    assert after.errors == before.errors, after.last_error
    assert after.lines_read - before.lines_read == 2 * len(bad) + 1
    assert {f"atuin:good-{first + i}" for i in range(len(bad) + 1)} <= set(list_block_ids(conn))
    assert refused(after) - refused(before) <= len(bad)
