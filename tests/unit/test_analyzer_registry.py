"""The registry of log formats: each reader detects its own format's lines and no other's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.analyzer import ingest, registry
from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.reader import JSON_LINES
from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.analyzer.tail import RawLine
from learnerd.store.blocks import Cell
from learnerd.store.db import connect, transaction

_GENERATE = "github.com/jlewi/foyle/app/pkg/agent.(*Agent).Generate"

# Sample lines of every registered format, by reader name: a new reader adds its own here.
SAMPLES: dict[str, list[str]] = {
    "blocklog": [
        event_line("context", "b1", "2024-05-01T12:00:00Z", cells=[Cell("markup", "list the pods")]),
        event_line("generated", "b1", 1714564801.0, cell=Cell("code", "kubectl get pods", "bash")),
        event_line("executed", "b1", 1714564809.0, cell=Cell("code", "kubectl get pods", "bash"), exit_code=0),
    ],
    "foyle": [
        json.dumps({"severity": "info", "time": 1713316007.1, "caller": "app/main.go:10", "message": "Starting"}),
        json.dumps(
            {
                "severity": "info",
                "time": 1713316008.2,
                "function": _GENERATE,
                "message": "Agent.Generate",
                "traceId": "t1",
                "request": {"doc": {"blocks": []}},
            }
        ),
        json.dumps(
            {
                "severity": "info",
                "time": 1713316009.3,
                "function": "github.com/jlewi/foyle/app/pkg/agent.(*Agent).LogEvents",
                "message": "LogEvent",
                "event": {"type": "EXECUTE", "selectedId": "c1", "cells": []},
            }
        ),
    ],
    "claude-code": [
        json.dumps(
            {
                "type": "user",
                "sessionId": "s1",
                "uuid": "u1",
                "cwd": "/srv",
                "timestamp": "2025-09-03T10:00:00.000Z",
                "message": {"role": "user", "content": "list the pods"},
            }
        ),
        json.dumps({"type": "summary", "summary": "Pods listed", "leafUuid": "u1"}),
    ],
    "codex": [
        json.dumps({"timestamp": "2025-06-01T10:00:00Z", "type": "session_meta", "payload": {"id": "s2"}}),
        json.dumps(
            {
                "timestamp": "2025-06-01T10:00:02Z",
                "type": "response_item",
                "payload": {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
            }
        ),
    ],
    "otel-genai": [json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": []}]}]})],
    "atuin": [  # a row of atuin's history table, as the SQLite framing gives it
        json.dumps({"_rowid": 1, "id": "0199", "timestamp": 1, "duration": 1, "exit": 0, "command": "ls", "cwd": "/"})
    ],
    "own-log": [
        json.dumps({"event": "analyzer pass failed; will retry", "level": "error", "timestamp": "2024-05-01T12:00Z"}),
        json.dumps({"event": "log file renamed; following it", "log_level": "info", "file": "/logs/a.jsonl"}),
    ],
}

# JSON objects no reader claims: another program's lines.
FOREIGN = [
    json.dumps({"level": "info", "ts": 1713316007.1, "msg": "runme server started"}),
    json.dumps({"message": 5, "severity": "info"}),
    "{}",
]


def _all_samples() -> list[tuple[str, str]]:
    return [(name, line) for name, lines in SAMPLES.items() for line in lines]


def test_every_registered_reader_has_samples_and_a_name_of_its_own():
    names = [reader.name for reader in registry.READERS]
    assert len(set(names)) == len(names)
    assert set(SAMPLES) == set(names)


@pytest.mark.parametrize("reader", registry.READERS, ids=lambda r: r.name)
@pytest.mark.parametrize(("owner", "line"), _all_samples())
def test_a_reader_detects_its_own_formats_lines_and_no_other(reader, owner, line):
    assert reader.detect(json.loads(line)) is (reader.name == owner)


@pytest.mark.parametrize("line", FOREIGN)
def test_a_line_no_reader_detects_is_foreign_and_its_reason_names_the_readers(tmp_path: Path, line):
    assert registry.reader_for(json.loads(line), JSON_LINES) is None
    conn = connect(tmp_path / "db.sqlite")
    with transaction(conn):
        result = ingest.ingest_line(conn, RawLine(1, line.encode(), len(line)), 1.0)
    assert result.outcome == ingest.FOREIGN and result.reader == ""
    assert (
        result.reason.startswith("not a block log")
        and "(blocklog, foyle, claude-code, codex, otel-genai, own-log)" in result.reason
    )


def test_a_line_two_formats_would_claim_goes_to_the_first_in_the_registry():
    line = json.loads(SAMPLES["blocklog"][0]) | {"message": "also a string message"}
    assert registry.reader_for(line, JSON_LINES).name == "blocklog"


def test_every_line_of_foyles_real_logs_goes_to_the_foyle_reader(peer_data: Path):
    paths = sorted((peer_data / "foyle").iterdir())
    lines = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    assert lines and {registry.reader_for(obj, JSON_LINES).name for obj in lines} == {"foyle"}


@pytest.mark.parametrize(("folder", "reader"), [("claude-code", "claude-code"), ("codex", "codex")])
def test_every_line_of_the_assistants_real_logs_goes_to_its_reader(peer_data: Path, folder: str, reader: str):
    paths = sorted((peer_data / "assistant-logs" / folder).glob("*.jsonl"))
    lines = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    assert lines and {registry.reader_for(obj, JSON_LINES).name for obj in lines} == {reader}


def test_formats_restrict_the_readers_a_record_may_go_to():
    line = json.loads(SAMPLES["claude-code"][0])
    assert registry.reader_for(line, JSON_LINES, frozenset({"claude-code"})).name == "claude-code"
    assert registry.reader_for(line, JSON_LINES, frozenset({"codex", "blocklog"})) is None


def test_an_unknown_format_in_the_settings_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown formats \\['claude'\\]: known are blocklog, foyle, claude-code"):
        AnalyzerConfig(formats=["claude"])
