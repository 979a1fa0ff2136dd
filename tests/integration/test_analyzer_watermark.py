"""Watermarks and crash safety: blocks and watermark commit together; a restart resumes exactly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell, list_block_ids
from learnerd.store.foyle_traces import count_partial_traces
from tests.support.analyzer import Harness, append


def ev(block_id: str) -> str:
    return event_line("executed", block_id, 1.0, cell=Cell("code", f"echo {block_id}"), exit_code=0)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    return Harness(tmp_path, [tmp_path / "logs"])


async def _sync_one_batch(harness: Harness, **config: object) -> None:
    """Run a sync on a new analyzer and cancel it right after its first batch commits (a crash)."""
    with anyio.CancelScope() as scope:

        def notify(block_id: str) -> None:
            harness.notified.append(block_id)
            scope.cancel()  # delivered at the analyzer's next checkpoint: between two batches

        with harness.analyzer(notify, **config) as analyzer:
            await analyzer.sync()


@pytest.mark.anyio
async def test_restarts_resume_where_the_last_run_stopped(harness: Harness):
    files = [harness.log_dirs[0] / "a.jsonl", harness.log_dirs[0] / "b.jsonl"]
    expected = []
    for round_ in range(6):
        for f in files:
            ids = [f"{f.stem}-{round_}-{i}" for i in range(5)]
            append(f, "".join(ev(i) for i in ids))
            expected += ids
        await _sync_one_batch(harness, batch_max_lines=3)
    stats = await harness.analyzer(batch_max_lines=3).sync()  # the last run goes to the end
    assert sorted(harness.notified) == sorted(expected)  # every block once: none skipped, none twice
    assert len(harness.notified) == len(set(harness.notified))
    assert stats.lines_read < len(expected)  # the interrupted runs did part of the work
    for f in files:
        assert harness.watermark(f) == (f.stat().st_size, 30)


@pytest.mark.anyio
async def test_a_failure_mid_batch_rolls_back_the_blocks_the_traces_and_the_watermark(harness: Harness, peer_data):
    foyle_request = (peer_data / "foyle" / "generate_trace_lines.jsonl").read_text().splitlines()[0]
    log_file = harness.log_dirs[0] / "a.jsonl"
    lines = [ev(f"b{i}") for i in range(1, 5)] + [foyle_request + "\n", ev("boom")]
    lines += [ev(f"b{i}") for i in range(7, 11)]
    log_file.write_text("".join(lines))

    def database_fails() -> None:
        raise OSError("injected: disk I/O error")

    # an exception in an SQL function is an sqlite3.OperationalError: the database failing, not the line
    harness.conn.create_function("database_fails", 0, database_fails)
    harness.conn.execute(
        "CREATE TRIGGER fail BEFORE INSERT ON blocks WHEN NEW.id = 'boom' BEGIN SELECT database_fails(); END"
    )
    analyzer = harness.analyzer(batch_max_lines=4)
    with pytest.raises(sqlite3.OperationalError):
        await analyzer.sync()
    # The first batch (lines 1-4) committed; the second (5-8) left nothing behind.
    assert list_block_ids(harness.conn) == ["b1", "b2", "b3", "b4"]
    assert harness.take_notified() == ["b1", "b2", "b3", "b4"]
    assert harness.watermark(log_file) == (sum(len(x) for x in lines[:4]), 4)
    assert count_partial_traces(harness.conn) == 0
    harness.conn.execute("DROP TRIGGER fail")
    stats = await analyzer.sync()
    assert harness.take_notified() == ["boom", "b7", "b8", "b9", "b10"] and stats.pending_traces == 1
    assert harness.watermark(log_file) == (log_file.stat().st_size, 10)


@pytest.mark.anyio
async def test_a_failing_watermark_write_rolls_back_the_blocks(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2"))
    harness.conn.execute("CREATE TRIGGER fail BEFORE INSERT ON watermarks BEGIN SELECT RAISE(ABORT, 'injected'); END")
    with pytest.raises(sqlite3.Error, match="injected"):
        await harness.analyzer().sync()
    assert list_block_ids(harness.conn) == [] and harness.take_notified() == []
    harness.conn.execute("DROP TRIGGER fail")
    await harness.analyzer().sync()
    assert harness.take_notified() == ["b1", "b2"]


@pytest.mark.anyio
async def test_a_backlog_is_ingested_in_bounded_batches_that_yield_to_the_event_loop(harness: Harness):
    log_file = harness.log_dirs[0] / "backlog.jsonl"
    log_file.write_text("".join(ev(f"b{i}") for i in range(2500)))
    timeline: list[object] = []
    analyzer = harness.analyzer(lambda block_id: timeline.append(harness.watermark(log_file)[1]), batch_max_lines=1000)

    async def ticker() -> None:
        while True:
            timeline.append("tick")
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0)
        await analyzer.sync()
        tg.cancel_scope.cancel()
    watermarks = [x for x in timeline if x != "tick"]
    assert sorted(set(watermarks)) == [1000, 2000, 2500]  # three transactions
    first_of_batch2 = timeline.index(2000)
    last_of_batch1 = len(timeline) - 1 - timeline[::-1].index(1000)
    assert "tick" in timeline[last_of_batch1:first_of_batch2]  # other tasks ran between the batches


@pytest.mark.anyio
async def test_a_sync_returns_even_while_its_file_keeps_growing(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text("".join(ev(f"b{i}") for i in range(10)))

    def notify(block_id: str) -> None:  # every block read makes the file grow by one more
        harness.notified.append(block_id)
        append(log_file, ev(f"more-{len(harness.notified)}"))

    with anyio.fail_after(10):
        stats = await harness.analyzer(notify, batch_max_lines=2).sync()
    assert 10 <= stats.lines_read < 20 and harness.notified[:10] == [f"b{i}" for i in range(10)]
