"""A format added to the registry, and nothing else, is read end to end by the analyzer.

"tiny" is a made-up format: one JSON object per line, ``{"tiny": <block id>, "ran": <command>,
"time": <epoch seconds>}`` for a command someone ran, ``{"tiny": <block id>, "wait": true}`` for a record
kept waiting for another; an empty block id names no block.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from learnerd.analyzer import registry
from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.fields import parse_time, require
from learnerd.analyzer.reader import EVENTS, JSON_LINES, PENDING, UNJOINABLE, Parsed, Reader, Record
from learnerd.store.blocks import BlockEvent, Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, captured_logs

WAITING: list[str] = []  # the tiny records kept waiting (a real format keeps them in the store)


def _parse(conn: sqlite3.Connection, record: Record, now: float) -> Parsed:
    block_id = require(record, "tiny", str)
    if record.get("wait") is True:
        WAITING.append(block_id)
        return Parsed(PENDING, trace_id=f"tiny-{block_id}")
    if not block_id:
        return Parsed(UNJOINABLE, reason="no_block_id")
    executed = Cell("code", require(record, "ran", str), "bash")
    return Parsed(EVENTS, [BlockEvent(block_id, "tiny", parse_time(record.get("time")), executed=executed)])


TINY = Reader("tiny", JSON_LINES, detect=lambda r: "tiny" in r, parse=_parse, pending=lambda conn: len(WAITING))

LINES = [
    {"tiny": "t1", "ran": "ls -la", "time": 1714564800.0},
    {"tiny": "t2", "wait": True},
    {"tiny": "", "ran": "true", "time": 1714564801.0},
    {"tiny": "t3", "ran": 5, "time": 1714564802.0},
]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    WAITING.clear()
    return Harness(tmp_path, [tmp_path / "logs"])


def _write(harness: Harness) -> None:
    blocklog = event_line("executed", "b1", 1714564803.0, cell=Cell("code", "pwd", "bash"), exit_code=0)
    text = "".join(json.dumps(line) + "\n" for line in LINES) + blocklog
    (harness.log_dirs[0] / "mixed.jsonl").write_text(text)


@pytest.mark.anyio
async def test_a_format_outside_the_registry_is_foreign(harness: Harness):
    _write(harness)
    stats = await harness.analyzer().sync()
    assert stats.foreign_lines == len(LINES) and list_block_ids(harness.conn) == ["b1"]


@pytest.mark.anyio
async def test_a_reader_added_to_the_registry_is_read_end_to_end(harness: Harness, monkeypatch):
    monkeypatch.setattr(registry, "READERS", (*registry.READERS, TINY))
    _write(harness)
    with captured_logs() as logs:
        stats = await harness.analyzer().sync()
    assert list_block_ids(harness.conn) == ["b1", "t1"] and harness.take_notified() == ["t1", "b1"]
    block = get_block(harness.conn, "t1")
    assert block.source == "tiny" and block.executed == Cell("code", "ls -la", "bash") and block.exit_code is None
    assert (stats.lines_read, stats.foreign_lines, stats.blocks_changed) == (5, 0, 2)
    assert stats.pending_traces == 1 and stats.unjoinable_traces == {"no_block_id": 1}
    assert stats.malformed_lines == 1 and stats.last_malformed.line == 4 and "ran" in stats.last_malformed.reason
    assert [e["event"] for e in logs if e.get("reason") == "no_block_id"] == ["tiny trace names no block; not ingested"]
