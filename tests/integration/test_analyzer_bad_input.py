"""Bad input, rotation and truncation: each counted and logged with file and line; ingestion goes on."""

from __future__ import annotations

import json
import logging
import os
import tracemalloc
from pathlib import Path

import pytest
import structlog

from learnerd.analyzer.blocklog import event_line
from learnerd.daemon.logging import configure_logging
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, append, captured_logs

MB = 1_000_000


def ev(block_id: str, text: str = "ls", time: float = 1.0) -> str:
    return event_line("executed", block_id, time, cell=Cell("code", text, "bash"), exit_code=0)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    return Harness(tmp_path, [tmp_path / "logs"])


def _by_event(logs: list[dict], prefix: str) -> list[tuple[str, int]]:
    return [(Path(e["file"]).name, e["line"]) for e in logs if e["event"].startswith(prefix)]


@pytest.mark.anyio
async def test_each_bad_line_is_counted_and_logged_and_the_rest_is_ingested(harness: Harness):
    good = ev("good-1")
    lines = [
        good.encode(),  # 1
        good[: len(good) // 2].encode() + b"\n",  # 2 truncated JSON
        b'{"learnerd":1,"type":"executed","block_id":"\xff\xfe","time":1}\n',  # 3 invalid UTF-8
        json.dumps({"learnerd": 1, "type": "renamed", "block_id": "x", "time": 1}).encode() + b"\n",  # 4 unknown
        b'{"learnerd":1,"type":"executed","block_id":"x","time":1,"cell":' + b'"' + b"y" * (10 * MB) + b'"}\n',  # 5
        b"[1, 2, 3]\n",  # 6 not an object
        b'{"hello": "world"}\n',  # 7 neither format: another program's JSON, skipped as foreign
        json.dumps({"learnerd": 1, "type": "executed", "block_id": "x", "time": 1}).encode() + b"\n",  # 8 no cell
        b"   \n",  # 9 blank: ignored
        b'{"learnerd": 1, "type": "executed", "block_id": "x", "time": NaN}\n',  # 10 NaN is not JSON
        json.dumps({"learnerd": 9, "type": "executed"}).encode() + b"\n",  # 11 newer format version
        ev("good-2").encode(),  # 12
    ]
    (harness.log_dirs[0] / "bad.jsonl").write_bytes(b"".join(lines))
    with captured_logs() as logs:
        stats = await harness.analyzer().sync()  # default max_line_bytes: 4 MiB < the 10 MB line
    assert list_block_ids(harness.conn) == ["good-1", "good-2"]
    assert stats.lines_read == 12
    assert (stats.malformed_lines, stats.unknown_events, stats.oversized_lines, stats.foreign_lines) == (5, 2, 1, 1)
    assert _by_event(logs, "malformed log line") == [("bad.jsonl", n) for n in (2, 3, 6, 8, 10)]
    assert _by_event(logs, "log file holds lines that are not a block log") == [("bad.jsonl", 7)]
    assert _by_event(logs, "unknown event") == [("bad.jsonl", 4), ("bad.jsonl", 11)]
    assert _by_event(logs, "oversized log line") == [("bad.jsonl", 5)]
    reasons = {e["line"]: e["reason"] for e in logs if e["event"].startswith("malformed")}
    assert "invalid UTF-8" in reasons[3] and "invalid JSON" in reasons[2] and "cell" in reasons[8]
    assert all(e["log_level"] == "warning" for e in logs if "line" in e and e["event"] != "log file deleted")
    assert (stats.last_malformed.file, stats.last_malformed.line) == (str(harness.log_dirs[0] / "bad.jsonl"), 10)


@pytest.mark.anyio
async def test_a_10_mb_line_within_the_limit_is_ingested(harness: Harness):
    big = "echo " + "y" * (10 * MB)
    (harness.log_dirs[0] / "big.jsonl").write_text(ev("big", big) + ev("after"))
    stats = await harness.analyzer(max_line_bytes=16 * 1024 * 1024).sync()
    assert stats.oversized_lines == 0 and get_block(harness.conn, "big").executed.text == big
    assert "after" in list_block_ids(harness.conn)


@pytest.mark.anyio
async def test_an_oversized_line_is_skipped_without_reading_it_whole(harness: Harness):
    (harness.log_dirs[0] / "big.jsonl").write_text(ev("big", "y" * (10 * MB)) + ev("after"))
    analyzer = harness.analyzer(max_line_bytes=1024 * 1024)
    tracemalloc.start()
    try:
        stats = await analyzer.sync()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.oversized_lines == 1 and list_block_ids(harness.conn) == ["after"]
    assert peak < 4 * MB, f"peak {peak} bytes: the 10 MB line was held in memory"


@pytest.mark.anyio
async def test_a_partial_last_line_waits_for_its_newline(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    second = ev("b2")
    log_file.write_text(ev("b1") + second[:20])
    analyzer = harness.analyzer()
    stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1"] and harness.watermark(log_file) == (len(ev("b1")), 1)
    append(log_file, second[20:-1])  # the whole object, still without its LF: consumed as a whole record
    append(log_file, "\n")
    append(log_file, ev("b3"))
    stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1", "b2", "b3"] and harness.take_notified() == ["b1", "b2", "b3"]
    assert stats.lines_read == 3 and stats.malformed_lines == 0
    assert harness.watermark(log_file) == (log_file.stat().st_size, 3)


@pytest.mark.anyio
async def test_a_last_line_that_is_a_whole_object_is_read_once_even_when_its_newline_comes_later(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2").rstrip("\n"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    assert harness.take_notified() == ["b1", "b2"]
    append(log_file, "\n" + ev("b3"))
    stats = await harness.analyzer().sync()  # a restart in between: the watermark is mid-line
    assert harness.take_notified() == ["b3"] and stats.lines_read == 1 and stats.malformed_lines == 0
    assert harness.watermark(log_file) == (log_file.stat().st_size, 3)
    append(log_file, ev("b4").rstrip("\n"))
    await analyzer.sync()
    append(log_file, 'junk"}\n' + ev("b5"))  # bytes glued to an already-read line: malformed, line 4
    with captured_logs() as logs:
        stats = await analyzer.sync()
    assert harness.take_notified() == ["b4", "b5"] and _by_event(logs, "malformed") == [("a.jsonl", 4)]


@pytest.mark.anyio
async def test_a_file_deleted_while_tailed_is_finished_and_dropped(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    append(log_file, ev("b2") + ev("b3"))
    log_file.unlink()  # the analyzer still holds the file open
    (harness.log_dirs[0] / "other.jsonl").write_text(ev("b4"))
    with captured_logs() as logs:
        stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1", "b2", "b3", "b4"]
    assert stats.deleted_files == 1 and stats.files_tracked == 1 and harness.watermark(log_file) is None
    assert _by_event(logs, "log file deleted") == [("a.jsonl", 3)]


@pytest.mark.anyio
async def test_a_file_deleted_while_learnerd_was_down_is_dropped(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1"))
    with harness.analyzer() as analyzer:
        await analyzer.sync()
    log_file.unlink()
    stats = await harness.analyzer().sync()
    assert stats.deleted_files == 1 and stats.files_tracked == 0 and harness.watermark(log_file) is None


@pytest.mark.anyio
async def test_a_file_truncated_while_tailed_is_read_again_from_the_start(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2") + ev("b3"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    harness.take_notified()
    with open(log_file, "r+b") as f:
        f.truncate(0)
        f.write(ev("b4").encode())
    with captured_logs() as logs:
        stats = await analyzer.sync()
    assert stats.truncations == 1 and harness.take_notified() == ["b4"]
    assert _by_event(logs, "log file truncated") == [("a.jsonl", 3)]
    assert harness.watermark(log_file) == (log_file.stat().st_size, 1)


@pytest.mark.anyio
async def test_a_file_rewritten_in_place_past_its_watermark_is_read_again(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1"))
    await harness.analyzer().sync()
    harness.take_notified()
    log_file.write_text(ev("c1") + ev("c2") + ev("c3"))  # same inode, longer, different first bytes
    with captured_logs() as logs:
        stats = await harness.analyzer().sync()
    assert stats.truncations == 1 and harness.take_notified() == ["c1", "c2", "c3"]
    assert _by_event(logs, "log file replaced") == [("a.jsonl", 1)]


@pytest.mark.anyio
@pytest.mark.parametrize("restart", [False, True], ids=["handle held", "after a restart"])
async def test_rotation_by_rename_loses_nothing_and_reads_nothing_twice(harness: Harness, restart: bool):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    append(log_file, ev("b3"))  # written just before rotation, not read yet
    log_file.rename(harness.log_dirs[0] / "a.jsonl.1")  # logrotate's default: rename, then create
    log_file.write_text(ev("b4") + ev("b5"))
    if restart:
        analyzer.close()
        analyzer = harness.analyzer()
    with captured_logs() as logs:
        stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1", "b2", "b3", "b4", "b5"]
    assert harness.take_notified() == ["b1", "b2", "b3", "b4", "b5"]
    assert stats.rotations == 1 and _by_event(logs, "log file rotated") == [("a.jsonl", 3)]
    assert stats.lines_read == (5 if not restart else 3)
    assert harness.watermark(log_file) == (log_file.stat().st_size, 2)


@pytest.mark.anyio
async def test_rotation_to_another_log_name_keeps_the_watermark(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1"))
    analyzer = harness.analyzer()
    await analyzer.sync()
    append(log_file, ev("b2"))
    rotated = harness.log_dirs[0] / "a.1.jsonl"
    log_file.rename(rotated)
    log_file.write_text(ev("b3"))
    stats = await analyzer.sync()
    assert harness.take_notified() == ["b1", "b2", "b3"] and stats.lines_read == 3 and stats.rotations == 1
    assert harness.watermark(rotated) == (rotated.stat().st_size, 2)
    assert harness.watermark(log_file) == (log_file.stat().st_size, 1)


@pytest.mark.anyio
async def test_an_unreadable_file_is_logged_once_and_the_others_go_on(harness: Harness):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    locked = harness.log_dirs[0] / "locked.jsonl"
    locked.write_text(ev("b1"))
    locked.chmod(0)
    (harness.log_dirs[0] / "open.jsonl").write_text(ev("b2"))
    analyzer = harness.analyzer()
    with captured_logs() as logs:
        await analyzer.sync()
        stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b2"] and stats.errors == 1
    assert [Path(e["file"]).name for e in logs if e["event"].startswith("log file unreadable")] == ["locked.jsonl"]
    locked.chmod(0o644)
    await analyzer.sync()
    assert list_block_ids(harness.conn) == ["b1", "b2"]


@pytest.mark.anyio
async def test_learnerds_own_log_in_a_log_directory_does_not_feed_on_itself(harness: Harness):
    logs = harness.log_dirs[0]
    (logs / "a.jsonl").write_text("not json\n")
    old_config, old_handlers, old_level = structlog.get_config(), logging.root.handlers[:], logging.root.level
    with open(logs / "learnerd.log", "a") as own_log:
        configure_logging("info", json=True, stream=own_log)
        try:
            analyzer = harness.analyzer()
            for _ in range(3):
                stats = await analyzer.sync()
                own_log.flush()
        finally:
            structlog.configure(**old_config)
            logging.root.handlers[:] = old_handlers
            logging.root.setLevel(old_level)
    assert stats.malformed_lines == 1  # only "not json"; the warning about it was skipped when read back
    assert stats.skipped_lines == 1 and (logs / "learnerd.log").read_text().count("malformed log line") == 1
