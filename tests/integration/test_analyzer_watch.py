"""run(): new lines and new files are picked up while it runs (watchfiles, and polling as the fallback)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell, list_block_ids
from tests.support.analyzer import Harness, append


def ev(block_id: str) -> str:
    return event_line("executed", block_id, 1.0, cell=Cell("code", "ls"), exit_code=0)


async def _until_watching(harness: Harness, logs: Path) -> None:
    """Append probe events until one is noticed: watchfiles arms its watcher in a thread shortly
    after run() starts, and a change made before that is only seen by the next rescan."""
    probe = logs / "probe.jsonl"
    with anyio.fail_after(10):
        for i in range(1000):
            append(probe, ev(f"probe-{i}"))
            try:
                await harness.wait_notified(f"probe-{i}", timeout=0.2)
                break
            except TimeoutError:
                continue
    harness.notified[:] = [b for b in harness.notified if not b.startswith("probe-")]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    return Harness(tmp_path, [tmp_path / "logs", tmp_path / "later"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    "config",
    [{"poll_interval_s": 30.0}, {"force_polling": True, "poll_interval_s": 0.2}],
    ids=["watchfiles", "polling only"],
)
async def test_appended_lines_new_files_and_new_directories_are_picked_up(harness: Harness, config):
    logs = harness.log_dirs[0]
    (logs / "a.jsonl").write_text(ev("b1"))
    analyzer = harness.analyzer(**config)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        assert harness.take_notified() == ["b1"]  # the initial sync is done when run() reports started
        await _until_watching(harness, logs)

        append(logs / "a.jsonl", ev("b2"))
        await harness.wait_notified("b2")

        (logs / "b.jsonl").write_text(ev("b3"))
        await harness.wait_notified("b3")

        (logs / "sub" / "deeper").mkdir(parents=True)
        (logs / "sub" / "deeper" / "c.log").write_text(ev("b4"))
        await harness.wait_notified("b4")

        tg.cancel_scope.cancel()
    assert sorted(harness.notified) == ["b2", "b3", "b4"]  # each once


@pytest.mark.anyio
async def test_a_log_directory_created_later_is_watched(harness: Harness):
    later = harness.log_dirs[1]
    analyzer = harness.analyzer(poll_interval_s=0.2)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        later.mkdir()
        (later / "a.jsonl").write_text(ev("b1"))
        await harness.wait_notified("b1")
        await anyio.sleep(0.5)  # let the watcher restart on the new directory
        append(later / "a.jsonl", ev("b2"))
        await harness.wait_notified("b2")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_run_survives_a_failing_pass_and_retries(harness: Harness):
    logs = harness.log_dirs[0]

    def database_fails() -> None:
        raise OSError("injected: disk I/O error")

    # an exception in an SQL function is an sqlite3.OperationalError: the database failing, not the line
    harness.conn.create_function("database_fails", 0, database_fails)
    harness.conn.execute(
        "CREATE TRIGGER fail BEFORE INSERT ON blocks WHEN NEW.id = 'boom' BEGIN SELECT database_fails(); END"
    )
    analyzer = harness.analyzer(poll_interval_s=0.2)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        (logs / "a.jsonl").write_text(ev("b1") + ev("boom") + ev("b2"))
        with anyio.fail_after(10):
            while analyzer.stats.errors == 0:
                await anyio.sleep(0.01)
        assert list_block_ids(harness.conn) == []
        harness.conn.execute("DROP TRIGGER fail")
        await harness.wait_notified("b1", "boom", "b2")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_cancelling_run_returns_and_closes_the_files(harness: Harness):
    (harness.log_dirs[0] / "a.jsonl").write_text(ev("b1"))
    analyzer = harness.analyzer()
    with anyio.fail_after(10):  # no wait for watchfiles' own 5 s timeout
        async with anyio.create_task_group() as tg:
            await tg.start(analyzer.run)
            tg.cancel_scope.cancel()
    assert analyzer._open_fds == {}
