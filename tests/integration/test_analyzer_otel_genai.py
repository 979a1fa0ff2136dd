"""The analyzer over OpenTelemetry GenAI spans in OTLP/JSON (tests/fixtures/otel-genai: composed from the
semantic conventions, see its README; no real export was found)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from learnerd.store.assistant_sessions import count_rejected_attempts, rejected_attempts_of
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness
from tests.support.assistant_logs import OTEL_FIXTURE as FIXTURE

CONVERSATION = "conv_5f1c2a9e"
FIND = "find /var/log -type f -exec du -h {} + | sort -rh | head -5"


def block_id(call: str) -> str:
    return f"otel:{CONVERSATION}:{call}"


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    shutil.copy(FIXTURE, tmp_path / "logs" / FIXTURE.name)
    return Harness(tmp_path, [tmp_path / "logs"])


@pytest.mark.anyio
async def test_every_shell_tool_call_becomes_a_block_with_the_turn_before_it(harness: Harness):
    stats = await harness.analyzer().sync()
    calls = ["call_du", "call_find1", "call_find2", "call_uname", "call_uptime"]
    assert sorted(list_block_ids(harness.conn)) == sorted(block_id(c) for c in calls)
    du = get_block(harness.conn, block_id("call_du"))
    assert du.context == [
        Cell("markup", "How much space do the logs under /var/log take?", "markdown"),
        Cell("markup", "I'll measure the directory with du.", "markdown"),
    ]
    assert du.generated == du.executed == Cell("code", "du -sh /var/log", "bash") and du.exit_code == 0
    assert du.event_time == 1764000001.3
    failed, corrected = get_block(harness.conn, block_id("call_find1")), get_block(harness.conn, block_id("call_find2"))
    assert failed.executed.text == FIND and failed.exit_code == 1
    assert corrected.executed.text == f"sudo {FIND}" and corrected.exit_code == 0
    assert failed.context[0].text == corrected.context[0].text == "Which five files there are the largest?"
    assert rejected_attempts_of(harness.conn, corrected.id) == [failed.id]
    assert count_rejected_attempts(harness.conn) == 1 and stats.rejected_attempts == {"otel-genai": 1}
    uname, uptime = get_block(harness.conn, block_id("call_uname")), get_block(harness.conn, block_id("call_uptime"))
    assert uname.executed.text == "uname -r" and uptime.executed.text == "uptime"
    assert uname.context == uptime.context == [Cell("markup", "Show the kernel version and the uptime.", "markdown")]
    assert stats.lines_read == 3 and stats.malformed_lines == stats.foreign_lines == 0
