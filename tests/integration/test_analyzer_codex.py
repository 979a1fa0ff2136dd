"""The analyzer over Codex's real rollouts (a copy of ../shared/peer-data/assistant-logs/codex: CLI 0.125.0,
whose exit codes come in exec_command_end events, and Desktop 0.128.0-alpha.1, whose exit codes are only in
the "Process exited with code N" text) and over variants the samples lack (from codex-rs's own types)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.codex import READER
from learnerd.privacy.redact import Redactor
from learnerd.store.assistant_sessions import count_rejected_attempts, rejected_attempts_of
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, append, assert_reads_keeps_what_parse_reads

# Read from the samples with python (not with learnerd): function_call items named exec_command per file,
# their non-zero exit codes (exec_command_end in the CLI file; the output text in the Desktop file), and
# the failures each followed by a success under the same user_message.
CLI = "019e1625-789d-76c0-80ab-3724b5ddb799"
DESKTOP = "019e1695-0522-7c83-8b39-0dd379793f80"
EXEC_COMMANDS = {CLI: 43, DESKTOP: 35}
FAILED = {  # call_id → exit code
    f"codex:{CLI}:call_NqXBF7JK4NH5M85YXgojxxmC": 2,
    f"codex:{CLI}:call_wAmN401U7zKVZ9wF0d5rGwMP": 1,
    f"codex:{CLI}:call_Rl3vKwoQD6TG9Xyz55hzx2jV": 1,
    f"codex:{CLI}:call_nTBN3WDXOZcJOBB6UsOQHpni": 1,
    f"codex:{DESKTOP}:call_3f7AXDMZ9PHz7zedrTO4twut": 1,
}
REJECTED_ATTEMPTS = 5


@pytest.fixture
def harness(peer_copy, tmp_path: Path) -> Harness:
    return Harness(tmp_path, [peer_copy("assistant-logs/codex")])


@pytest.mark.anyio
async def test_every_exec_command_of_both_rollout_versions_becomes_a_block_with_its_exit_code(harness: Harness):
    stats = await harness.analyzer().sync()
    ids = list_block_ids(harness.conn)
    for session, calls in EXEC_COMMANDS.items():
        assert sum(i.startswith(f"codex:{session}:") for i in ids) == calls
    blocks = [get_block(harness.conn, i) for i in ids]
    assert all(b.source == "codex" and b.generated == b.executed and b.context for b in blocks)
    assert {b.id: b.exit_code for b in blocks if b.exit_code != 0} == FAILED
    assert stats.malformed_lines == stats.unknown_events == stats.foreign_lines == 0
    assert stats.lines_read == 386 + 99


@pytest.mark.anyio
async def test_intent_is_the_user_message_and_failures_are_rejected_attempts(harness: Harness):
    stats = await harness.analyzer().sync()
    first = get_block(harness.conn, f"codex:{CLI}:call_Y2p6KmqwoTtpi6atpDPuxC5M")
    assert first.context == [Cell("markup", "show tools", "markdown")]
    assert first.executed.text.startswith("sed -n '1,180p' /Users/Sample_User/.codex/plugins/")
    failed = f"codex:{DESKTOP}:call_3f7AXDMZ9PHz7zedrTO4twut"
    corrected = [
        r[0] for r in harness.conn.execute("SELECT block_id FROM rejected_attempts WHERE attempt_id = ?", (failed,))
    ]
    assert len(corrected) == 1 and get_block(harness.conn, corrected[0]).exit_code == 0
    assert rejected_attempts_of(harness.conn, corrected[0]) == [failed]
    assert count_rejected_attempts(harness.conn) == REJECTED_ATTEMPTS
    assert stats.rejected_attempts == {"codex": REJECTED_ATTEMPTS}


def _item(kind: str, payload: dict, when: str) -> str:
    return json.dumps({"timestamp": when, "type": kind, "payload": payload}) + "\n"


@pytest.mark.anyio
async def test_legacy_shell_calls_and_local_shell_calls(tmp_path: Path):
    # Variants of codex-rs/protocol/src/models.rs the samples lack: the legacy "shell" function (argv in
    # arguments.command, its output a JSON string with metadata.exit_code) and local_shell_call (action.command).
    logs = tmp_path / "logs" / "2025" / "06" / "01"
    logs.mkdir(parents=True)
    append(
        logs / "rollout-2025-06-01T10-00-00-s2.jsonl",
        _item("session_meta", {"id": "s2", "cwd": "/srv/app", "cli_version": "0.10.0"}, "2025-06-01T10:00:00Z")
        + _item("event_msg", {"type": "user_message", "message": "count the lines of main.py"}, "2025-06-01T10:00:01Z")
        + _item(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps({"command": ["bash", "-lc", "wc -l main.py"]}),
                "call_id": "c1",
            },
            "2025-06-01T10:00:02Z",
        )
        + _item(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": json.dumps({"output": "12 main.py\n", "metadata": {"exit_code": 0, "duration_seconds": 0.1}}),
            },
            "2025-06-01T10:00:03Z",
        )
        + _item(
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "c2",
                "status": "completed",
                "action": {"type": "exec", "command": ["ls", "-l", "my dir"]},
            },
            "2025-06-01T10:00:04Z",
        )
        + _item(
            "event_msg",
            {"type": "exec_command_end", "call_id": "c2", "command": ["ls", "-l", "my dir"], "exit_code": 2},
            "2025-06-01T10:00:05Z",
        )
        + _item("response_item", {"type": "world_state", "anything": 1}, "2025-06-01T10:00:06Z"),
    )
    harness = Harness(tmp_path, [tmp_path / "logs"])
    stats = await harness.analyzer().sync()
    assert sorted(list_block_ids(harness.conn)) == ["codex:s2:c1", "codex:s2:c2"]
    wc = get_block(harness.conn, "codex:s2:c1")
    assert wc.executed == Cell("code", "wc -l main.py", "bash") and wc.exit_code == 0
    assert wc.context == [Cell("markup", "count the lines of main.py", "markdown")]
    ls = get_block(harness.conn, "codex:s2:c2")
    assert ls.executed.text == "ls -l 'my dir'" and ls.exit_code == 2
    assert stats.malformed_lines == 0 and stats.skipped_lines == 3  # session_meta, user_message, world_state


@pytest.mark.anyio
async def test_a_call_whose_command_holds_a_secret_is_learned_redacted_not_dropped(tmp_path: Path):
    # The arguments are a JSON string: the secret is redacted inside it, decoded, and it stays JSON.
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    logs = tmp_path / "logs"
    logs.mkdir()
    append(
        logs / "rollout-2025-06-01T10-00-00-s3.jsonl",
        _item("session_meta", {"id": "s3", "cwd": "/srv"}, "2025-06-01T10:00:00Z")
        + _item("event_msg", {"type": "user_message", "message": "call the api"}, "2025-06-01T10:00:01Z")
        + _item(
            "response_item",
            {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": f'curl -H "Authorization: Bearer {token}" https://api'}),
                "call_id": "c1",
            },
            "2025-06-01T10:00:02Z",
        )
        + _item(
            "event_msg",
            {"type": "exec_command_end", "call_id": "c1", "command": ["bash", "-lc", "curl"], "exit_code": 0},
            "2025-06-01T10:00:03Z",
        ),
    )
    harness = Harness(tmp_path, [logs])
    analyzer = Analyzer(harness.conn, [logs], harness.notified.append, redactor=Redactor(), clock=harness.clock)
    stats = await analyzer.sync()
    analyzer.close()
    block = get_block(harness.conn, "codex:s3:c1")
    assert stats.malformed_lines == 0 and block is not None
    assert block.generated.text == 'curl -H "Authorization: Bearer <BEARER_TOKEN>" https://api'


@pytest.mark.anyio
async def test_the_sessions_and_rejected_attempts_on_postgresql(peer_copy, tmp_path: Path, postgres_url: str):
    from learnerd.analyzer.analyzer import Analyzer
    from learnerd.store import db

    db.migrate(postgres_url)
    conn = db.connect(postgres_url)
    try:
        analyzer = Analyzer(conn, [peer_copy("assistant-logs/codex")], lambda _block_id: None)
        stats = await analyzer.sync()
        analyzer.close()
        assert len(list_block_ids(conn)) == sum(EXEC_COMMANDS.values()) and stats.malformed_lines == 0
        assert {i: get_block(conn, i).exit_code for i in FAILED} == FAILED
        assert count_rejected_attempts(conn) == REJECTED_ATTEMPTS
    finally:
        conn.close()


def test_the_part_of_each_real_line_the_reader_reads_parses_as_the_whole_line(peer_data: Path, tmp_path: Path):
    assert_reads_keeps_what_parse_reads(
        READER, sorted((peer_data / "assistant-logs" / "codex").glob("*.jsonl")), tmp_path
    )
