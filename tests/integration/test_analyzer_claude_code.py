"""The analyzer over Claude Code's real transcripts (a copy of ../shared/peer-data/assistant-logs/claude-code)
and over variants the samples lack (lines shaped after the public parsers' schemas)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.claude_code import READER
from learnerd.store.assistant_sessions import count_rejected_attempts, rejected_attempts_of
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, append, assert_reads_keeps_what_parse_reads

# Read from the samples with jq/python (not with learnerd): tool_use parts named "Bash" per file, the
# Bash results with is_error true, and the failures followed by a success under the same intent.
INIT_SESSION = "1af7fc5e-8455-4414-9ccd-011d40f70b2a"  # /init: 2 Bash calls, both succeeded
TODO_SESSION = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"  # 61 Bash calls (all in sub-agents), 9 is_error
BASH_CALLS = {INIT_SESSION: 2, TODO_SESSION: 61}
FAILED = 9
REJECTED_ATTEMPTS = 9  # line 157 → 159, 205 → 207, 209 → 212, 277 → 288, 331 → 334, 402/405/408/411 → 417
# The /init session's only turn is an isMeta line (the slash command's expansion): its 2 calls have no intent.
WITHOUT_INTENT = 2
TYPES_PROMPT = "Create TypeScript types and interfaces for a TODO app. Create a types/ directory with:"


def block_id(session: str, tool_use: str) -> str:
    return f"claude-code:{session}:{tool_use}"


@pytest.fixture
def harness(peer_copy, tmp_path: Path) -> Harness:
    return Harness(tmp_path, [peer_copy("assistant-logs/claude-code")])


@pytest.mark.anyio
async def test_every_bash_call_of_the_real_transcripts_becomes_a_block(harness: Harness):
    stats = await harness.analyzer().sync()
    ids = list_block_ids(harness.conn)
    for session, calls in BASH_CALLS.items():
        assert sum(i.startswith(f"claude-code:{session}:") for i in ids) == calls
    blocks = [get_block(harness.conn, i) for i in ids]
    assert all(b.source == "claude-code" and b.generated is not None and b.executed is not None for b in blocks)
    assert all(b.session == i.split(":")[1] for i, b in zip(ids, blocks, strict=True)), "each names its sessionId"
    assert all(b.generated.text == b.executed.text and b.executed.language == "bash" for b in blocks)
    assert sum(b.exit_code == 1 for b in blocks) == FAILED and sum(b.exit_code == 0 for b in blocks) == 63 - FAILED
    assert sum(not b.context for b in blocks) == WITHOUT_INTENT
    assert stats.malformed_lines == stats.unknown_events == stats.foreign_lines == 0
    assert stats.lines_read == 29 + 438


@pytest.mark.anyio
async def test_a_failed_command_is_the_rejected_attempt_of_the_success_after_it(harness: Harness):
    registry = CollectorRegistry()
    analyzer = Analyzer(harness.conn, harness.log_dirs, harness.notified.append, clock=harness.clock, registry=registry)
    stats = await analyzer.sync()
    failed = get_block(harness.conn, block_id(TODO_SESSION, "toolu_013pTcSZg4tDiEXHJtYS8YiD"))
    assert failed.executed == Cell("code", "ls -la types/", "bash") and failed.exit_code == 1
    assert failed.context[0].kind == "markup" and failed.context[0].text.startswith(TYPES_PROMPT)
    corrected = block_id(TODO_SESSION, "toolu_01WLGTKQ5mr3FTfe7VUmfY4U")
    assert get_block(harness.conn, corrected).exit_code == 0
    assert rejected_attempts_of(harness.conn, corrected) == [failed.id]
    builds = ["toolu_01CSi16ZXnnQne2EuM8ZxNB4", "toolu_01EThVZotbk7xiuWTxGByr79", "toolu_014dpyR6f5VnFfPg7Anv8S34"]
    builds.append("toolu_01DH2JFs47ZjoYNAsu6HcsL1")
    dev_server = block_id(TODO_SESSION, "toolu_01XwvWxY5KvW7VJFWXxvBkRP")
    assert rejected_attempts_of(harness.conn, dev_server) == sorted(block_id(TODO_SESSION, b) for b in builds)
    assert count_rejected_attempts(harness.conn) == REJECTED_ATTEMPTS
    assert stats.rejected_attempts == {"claude-code": REJECTED_ATTEMPTS} and stats.rejected_suggestions == {}
    metric = "learnerd_analyzer_rejected_attempts_total"
    assert registry.get_sample_value(metric, {"format": "claude-code"}) == REJECTED_ATTEMPTS


@pytest.mark.anyio
async def test_reading_the_transcripts_again_changes_nothing(harness: Harness):
    await harness.analyzer().sync()
    harness.take_notified()
    before = [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")]
    harness.conn.execute("DELETE FROM watermarks")  # as if every line were read again
    harness.clock.advance(60)
    again = await harness.analyzer().sync()
    assert harness.take_notified() == []
    assert again.rejected_attempts == {}, "a rejected attempt read again is not counted again"
    assert [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")] == before
    assert count_rejected_attempts(harness.conn) == REJECTED_ATTEMPTS


def _line(kind: str, content, when: str, **extra) -> str:
    line = {"type": kind, "sessionId": "s1", "uuid": when, "cwd": "/srv/app", "timestamp": when}
    line["message"] = {"role": kind, "content": content}
    return json.dumps({**line, **extra}) + "\n"


def _tool_use(tool_id: str, command: str) -> list[dict]:
    return [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}}]


def _result(tool_id: str, text: str, is_error: bool) -> list[dict]:
    return [{"type": "tool_result", "tool_use_id": tool_id, "content": text, "is_error": is_error}]


@pytest.mark.anyio
async def test_newer_exit_codes_denials_and_multi_command_turns(tmp_path: Path):
    # Variants from claude-code-viewer's schemas (ToolResultContentSchema) and 2.x transcripts: "Exit code N"
    # on the first line of a failed result, a permission denial, an interrupted command, other tools.
    logs = tmp_path / "logs"
    logs.mkdir()
    append(
        logs / "s1.jsonl",
        _line("user", "Run the test suite and show the git status", "2025-09-03T10:00:00.000Z")
        + _line("assistant", [{"type": "text", "text": "I'll run the tests first."}], "2025-09-03T10:00:01.000Z")
        + _line("assistant", _tool_use("t1", "pytest -q"), "2025-09-03T10:00:02.000Z")
        + _line("assistant", _tool_use("t2", "git status"), "2025-09-03T10:00:02.500Z")
        + _line("user", _result("t1", "Exit code 2\nno tests ran", True), "2025-09-03T10:00:03.000Z")
        + _line("user", _result("t2", "On branch main", False), "2025-09-03T10:00:04.000Z")
        + _line("assistant", _tool_use("t3", "rm -rf build"), "2025-09-03T10:00:05.000Z")
        + _line(
            "user",
            _result("t3", "The user doesn't want to proceed with this tool use. The tool use was rejected.", True),
            "2025-09-03T10:00:06.000Z",
        )
        + _line("assistant", _tool_use("t4", "sleep 600"), "2025-09-03T10:00:07.000Z")
        + _line(
            "user",
            _result("t4", "Command interrupted", True),
            "2025-09-03T10:00:08.000Z",
            toolUseResult={"stdout": "", "stderr": "", "interrupted": True, "isImage": False},
        )
        + _line(
            "assistant",
            [{"type": "tool_use", "id": "t5", "name": "Read", "input": {"file_path": "/srv/app/a.py"}}],
            "2025-09-03T10:00:09.000Z",
        )
        + _line("user", _result("t5", "print(1)", False), "2025-09-03T10:00:10.000Z"),
    )
    harness = Harness(tmp_path, [logs])
    stats = await harness.analyzer().sync()
    assert sorted(list_block_ids(harness.conn)) == [f"claude-code:s1:t{i}" for i in range(1, 5)]
    intent = [Cell("markup", "Run the test suite and show the git status", "markdown")]
    plan = Cell("markup", "I'll run the tests first.", "markdown")
    tests, status = get_block(harness.conn, "claude-code:s1:t1"), get_block(harness.conn, "claude-code:s1:t2")
    assert tests.context == status.context == [*intent, plan]
    assert tests.exit_code == 2 and status.exit_code == 0
    assert rejected_attempts_of(harness.conn, status.id) == [tests.id]
    denied = get_block(harness.conn, "claude-code:s1:t3")
    assert denied.suggestion_status == "rejected" and denied.executed is None
    assert get_block(harness.conn, "claude-code:s1:t4").exit_code == 130
    assert stats.malformed_lines == 0
    assert stats.rejected_attempts == {"claude-code": 1} and stats.rejected_suggestions == {"claude-code": 1}


@pytest.mark.anyio
async def test_secrets_in_turns_and_commands_are_redacted_before_anything_is_stored(tmp_path: Path):
    from learnerd.analyzer.analyzer import Analyzer
    from learnerd.privacy.redact import Redactor

    key, token = "AKIAZ7EXAMPLE4Q2W3E5", "ghp_" + "x7Kq2Lm9Pw4Rt6Yv8Zb1Nc3Df5Gh7Jk9Ls0Qa"
    logs = tmp_path / "logs"
    logs.mkdir()
    append(
        logs / "s1.jsonl",
        _line("user", f"upload the build with key {key}", "2025-09-03T10:00:00.000Z")
        + _line(
            "assistant", _tool_use("t1", f"GITHUB_TOKEN={token} gh release upload v1 dist/*"), "2025-09-03T10:00:01Z"
        )
        + _line("user", _result("t1", "uploaded", False), "2025-09-03T10:00:02.000Z"),
    )
    harness = Harness(tmp_path, [logs])
    analyzer = Analyzer(harness.conn, [logs], harness.notified.append, redactor=Redactor(), clock=harness.clock)
    stats = await analyzer.sync()
    analyzer.close()
    block = get_block(harness.conn, "claude-code:s1:t1")
    assert block.executed.text.startswith("GITHUB_TOKEN=<") and token not in block.executed.text
    assert key not in block.context[0].text and block.exit_code == 0
    stored = [
        repr(tuple(r))
        for table in ("blocks", "assistant_sessions")
        for r in harness.conn.execute(f"SELECT * FROM {table}")
    ]
    assert stored and not [row for row in stored if key in row or token in row]
    assert sum(stats.redactions.values()) >= 2


@pytest.mark.anyio
async def test_formats_in_the_settings_restrict_what_is_read(harness: Harness):
    stats = await harness.analyzer(formats=["codex", "blocklog"]).sync()
    assert list_block_ids(harness.conn) == [] and stats.foreign_lines == stats.lines_read == 29 + 438


def test_the_part_of_each_real_line_the_reader_reads_parses_as_the_whole_line(peer_data: Path, tmp_path: Path):
    assert_reads_keeps_what_parse_reads(
        READER, sorted((peer_data / "assistant-logs" / "claude-code").glob("*.jsonl")), tmp_path
    )
