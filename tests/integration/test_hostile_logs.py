"""Hostile log input (issue 14, cases 1, 7, 8 and 15; issue 15, item 12): whatever a log line, a file
or a directory holds, ingestion goes on to the next good line and the next file, and says where."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.discovery import MAX_DEPTH
from learnerd.store.blocks import Cell, get_block, list_block_ids
from learnerd.store.foyle_traces import count_partial_traces
from tests.support.analyzer import Harness, append, captured_logs

DEEP = 100_000  # JSON nesting far beyond Python's recursion limit (~1,000)
FOYLE_EXECUTE = "github.com/jlewi/foyle/app/pkg/executor.(*Executor).Execute"
FOYLE_LOG_EVENTS = "github.com/jlewi/foyle/app/pkg/agent.(*Agent).LogEvents"


def ev(block_id: str, text: str = "ls") -> str:
    return event_line("executed", block_id, 1.0, cell=Cell("code", text, "bash"), exit_code=0)


def executed(block_id: str = "x", **fields: object) -> dict:
    obj: dict = {"learnerd": 1, "type": "executed", "block_id": block_id, "time": 1.0}
    obj["cell"] = {"kind": "code", "text": "ls", "language": "bash"}
    obj["exit_code"] = 0
    obj.update(fields)
    return obj


def line(obj: dict) -> str:
    return json.dumps(obj) + "\n"  # ensure_ascii: a lone surrogate is written as the escape "\ud800"


def foyle_execute_trace(exit_text: str) -> str:
    """An Executor.Execute trace (request half, then response half) as foyle's zap logger writes it."""
    request = {"severity": "info", "time": 1714000000.0, "function": FOYLE_EXECUTE, "message": "Executing"}
    request |= {"traceId": "t-1", "request": {"block": {"id": "f-1", "contents": "ls", "kind": "CODE"}}}
    response = {"severity": "info", "time": 1714000001.0, "function": FOYLE_EXECUTE, "message": "Executed"}
    response |= {"traceId": "t-1", "response": {"outputs": [{"items": [{"text_data": exit_text}]}]}}
    return line(request) + line(response)


def foyle_log_event(cell_id: str) -> str:
    cell = {"kind": "CODE", "value": "ls", "metadata": {"runme.dev/id": cell_id}}
    event = {"type": "EXECUTE", "selectedId": cell_id, "cells": [cell]}
    return line(
        {"severity": "info", "time": 1714000000.0, "function": FOYLE_LOG_EVENTS, "message": "LogEvent"}
        | {"event": event}
    )


# name -> (the hostile text, its malformed line's number counted from the line after "good-1", the
# exception its reason names)
HOSTILE = {
    "exit_code 2**64": (line(executed(exit_code=2**64)), 1, "OverflowError"),
    "JSON nested 100,000 deep": (
        '{"learnerd": 1, "type": "context", "block_id": "x", "time": 1, "cells": ' + "[" * DEEP + "]" * DEEP + "}\n",
        1,
        "RecursionError",
    ),
    "lone surrogate in block_id": (line(executed("\ud800")), 1, "UnicodeEncodeError"),
    "lone surrogate in a cell": (line(executed(cell={"kind": "code", "text": "rm \udfff"})), 1, "UnicodeEncodeError"),
    "time 10**400": (line(executed(time=10**400)), 1, "OverflowError"),
    "foyle: exitCode 2**64": (foyle_execute_trace(f"exitCode: {2**64}"), 2, "OverflowError"),
    "foyle: lone surrogate in a LogEvent id": (foyle_log_event("\ud800"), 1, "UnicodeEncodeError"),
}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    (tmp_path / "logs").mkdir()
    return Harness(tmp_path, [tmp_path / "logs"])


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_hostile_line_is_one_malformed_line_and_everything_after_it_is_ingested(harness: Harness, name: str):
    text, bad_line, exception = HOSTILE[name]
    logs = harness.log_dirs[0]
    (logs / "a.jsonl").write_text(ev("good-1") + text + ev("good-2"), encoding="utf-8", errors="surrogatepass")
    (logs / "b.jsonl").write_text(ev("good-3"))  # a file after it in the scan
    analyzer = harness.analyzer()
    with captured_logs() as logs_seen:
        stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["good-1", "good-2", "good-3"]
    assert stats.malformed_lines == 1 and stats.errors == 0
    problem = stats.last_malformed
    assert (problem.file, problem.line) == (str(logs / "a.jsonl"), 1 + bad_line)
    assert problem.reason.startswith(exception)
    warned = [e for e in logs_seen if e["event"] == "malformed log line skipped"]
    assert [(Path(e["file"]).name, e["line"]) for e in warned] == [("a.jsonl", 1 + bad_line)]
    append(logs / "a.jsonl", ev("good-4"))
    stats = await analyzer.sync()  # the bad line is behind the watermark: not read again
    assert "good-4" in list_block_ids(harness.conn) and stats.malformed_lines == 1


@pytest.mark.anyio
async def test_a_malformed_foyle_half_leaves_the_other_half_pending(harness: Harness):
    (harness.log_dirs[0] / "foyle.logs.json").write_text(foyle_execute_trace(f"exitCode: {2**64}"))
    stats = await harness.analyzer().sync()
    assert stats.malformed_lines == 1 and count_partial_traces(harness.conn) == 1  # the request half waits
    (harness.log_dirs[0] / "foyle.logs.2.json").write_text(foyle_execute_trace("exitCode: 3").split("\n", 1)[1])
    await harness.analyzer().sync()
    assert get_block(harness.conn, "f-1").exit_code == 3 and count_partial_traces(harness.conn) == 0


@pytest.mark.anyio
async def test_a_file_that_fails_is_logged_once_and_the_files_after_it_are_read(harness: Harness):
    logs = harness.log_dirs[0]
    (logs / "a").mkdir()
    broken = os.path.join(os.fsencode(logs / "a"), b"\xff.jsonl")  # a name that is not UTF-8
    with open(broken, "w") as f:
        f.write(ev("in-broken-name"))
    (logs / "b.jsonl").write_text(ev("after"))
    analyzer = harness.analyzer()
    with captured_logs() as seen:
        await analyzer.sync()
        stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["after"]
    assert stats.errors == 1 and stats.last_error.reason.startswith("UnicodeEncodeError")
    assert stats.last_error.file == os.fsdecode(broken)
    assert [e["event"] for e in seen if e.get("log_level") == "error"] == [
        "log file failed; will retry, other files go on"
    ]


@pytest.mark.anyio
async def test_a_file_truncated_while_its_backlog_is_read_is_read_again(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2") + ev("b3"))

    def truncate_after_the_first_batch(block_id: str) -> None:
        harness.notified.append(block_id)
        if block_id == "b1":
            with open(log_file, "r+b") as f:  # the writer starts over, shorter than what was read
                f.truncate(0)
                f.write(ev("c").encode())

    analyzer = harness.analyzer(truncate_after_the_first_batch, batch_max_lines=1)
    stats = await analyzer.sync()
    stats = await analyzer.sync()
    assert harness.take_notified() == ["b1", "c"]
    assert stats.truncations == 1 and harness.watermark(log_file) == (len(ev("c")), 1)


@pytest.mark.anyio
async def test_a_file_replaced_while_its_backlog_is_read_is_read_again(harness: Harness):
    log_file = harness.log_dirs[0] / "a.jsonl"
    log_file.write_text(ev("b1") + ev("b2"))

    def rewrite_after_the_last_batch(block_id: str) -> None:
        harness.notified.append(block_id)
        if block_id == "b2":
            log_file.write_text(ev("c1") + ev("c2") + ev("c3"))  # same inode, longer, other first bytes

    analyzer = harness.analyzer(rewrite_after_the_last_batch, batch_max_lines=1)
    await analyzer.sync()
    stats = await analyzer.sync()
    assert harness.take_notified() == ["b1", "b2", "c1", "c2", "c3"] and stats.truncations == 1


def _nest(root: Path, depth: int) -> Path:
    """``root/d/d/.../d`` ``depth`` levels down, made one level at a time (os.makedirs recurses)."""
    path = root
    for _ in range(depth):
        path = path / "d"
        path.mkdir(exist_ok=True)
    return path


def _remove_nest(root: Path) -> None:
    """Remove ``root/d/...`` deepest first (shutil.rmtree, and so pytest's clean-up, recurses per level)."""
    levels = []
    path = root / "d"
    while path.is_dir():
        levels.append(path)
        path = path / "d"
    for level in reversed(levels):
        for entry in level.iterdir():
            if not entry.is_dir():
                entry.unlink()
        level.rmdir()


@pytest.fixture
def deep_logs(harness: Harness):
    yield harness.log_dirs[0]
    _remove_nest(harness.log_dirs[0])


@pytest.mark.anyio
async def test_a_1000_level_deep_directory_does_not_stop_discovery(harness: Harness, deep_logs: Path):
    logs = deep_logs
    (_nest(logs, 1000) / "too-deep.jsonl").write_text(ev("too-deep"))
    (_nest(logs, MAX_DEPTH) / "deepest.jsonl").write_text(ev("deepest"))
    (_nest(logs, MAX_DEPTH + 1) / "one-too-deep.jsonl").write_text(ev("one-too-deep"))
    analyzer = harness.analyzer(poll_interval_s=0.05)
    stats = await analyzer.sync()
    assert list_block_ids(harness.conn) == ["deepest"] and stats.errors == 0
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)  # the watcher too copes with the nest
        (logs / "new.jsonl").write_text(ev("new"))
        await harness.wait_notified("new")
        tg.cancel_scope.cancel()
    assert list_block_ids(harness.conn) == ["deepest", "new"] and analyzer.stats.errors == 0


@pytest.mark.anyio
async def test_an_idle_watched_analyzer_does_not_rescan_and_still_sees_every_change(harness: Harness):
    logs = harness.log_dirs[0]
    for i in range(20):
        (logs / f"f{i:02}.jsonl").write_text(ev(f"b{i}"))
    analyzer = harness.analyzer(poll_interval_s=0.02, rescan_interval_s=3600.0)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        rescans = analyzer.stats.rescans
        await anyio.sleep(0.5)  # ~25 poll ticks, idle
        assert analyzer.stats.rescans == rescans
        append(logs / "f07.jsonl", ev("appended"))
        (logs / "new.jsonl").write_text(ev("new-file"))
        await harness.wait_notified("appended", "new-file")
        assert analyzer.stats.rescans == rescans and analyzer.stats.files_tracked == 21
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_without_the_watcher_the_rescans_go_on(harness: Harness):
    analyzer = harness.analyzer(poll_interval_s=0.02, force_polling=True)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        rescans = analyzer.stats.rescans
        (harness.log_dirs[0] / "a.jsonl").write_text(ev("b1"))
        await harness.wait_notified("b1")
        assert analyzer.stats.rescans > rescans
        tg.cancel_scope.cancel()


RUNME_LINES = [  # runme's zap logger (production encoder): level / ts / caller / msg
    {"level": "info", "ts": 1714564800.123, "caller": "cmd/server.go:42", "msg": "started", "address": ":7863"},
    {"level": "warn", "ts": 1714564801.5, "caller": "runner/service.go:91", "msg": "session expired", "id": "01H"},
    {"level": "error", "ts": 1714564802.0, "caller": "runner/exec.go:12", "msg": "exit status 1"},
]


@pytest.mark.anyio
async def test_another_programs_json_log_is_skipped_with_one_warning_per_file(harness: Harness):
    logs = harness.log_dirs[0]
    (logs / "runme.log").write_text("".join(line(obj) for obj in RUNME_LINES) + ev("good"))
    settings = json.dumps({"runme": {"server": {"address": "127.0.0.1:7863"}, "tags": ["a", "b"]}}, indent=2)
    (logs / "settings.json").write_text(settings + "\n")
    with captured_logs() as seen:
        stats = await harness.analyzer().sync()
    assert list_block_ids(harness.conn) == ["good"]
    assert stats.malformed_lines == 0 and stats.foreign_lines == 3 + len(settings.splitlines())
    warned = [(Path(e["file"]).name, e["line"]) for e in seen if e["log_level"] == "warning"]
    assert warned == [("runme.log", 1), ("settings.json", 1)]
    assert all("not a block log" in e["reason"] for e in seen if e["log_level"] == "warning")


@pytest.mark.anyio
@pytest.mark.usefixtures("restore_log_level")
async def test_ctl_status_names_the_file_line_and_reason_of_the_last_malformed_line(short_root: Path, minilm, capsys):
    from learnerd.cmd.main import main
    from tests.support.daemon import daemon_config, eventually, running_service

    cfg = daemon_config(short_root)
    text, bad_line, _ = HOSTILE["exit_code 2**64"]
    (short_root / "logs" / "a.jsonl").write_text(ev("good-1") + text + ev("good-2"))
    (short_root / "logs" / "b.jsonl").write_text(ev("good-3"))
    async with running_service(cfg, minilm) as running:

        async def ingested() -> bool:
            return running.daemon.analyzer.stats.lines_read == 4

        await eventually(ingested, what="ingested")
        capsys.readouterr()
        argv = ["ctl", "status", "--state-dir", str(cfg.state_dir)]
        assert await anyio.to_thread.run_sync(main, argv) == 0
        table = capsys.readouterr().out
        assert await anyio.to_thread.run_sync(main, [*argv, "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
    where = f"{short_root / 'logs' / 'a.jsonl'}:{1 + bad_line}"
    assert where in table and "OverflowError" in table
    problem = status["analyzer"]["last_malformed"]
    assert (problem["file"], problem["line"]) == (str(short_root / "logs" / "a.jsonl"), 1 + bad_line)
    assert problem["reason"].startswith("OverflowError") and status["analyzer"]["malformed_lines"] == 1


@pytest.mark.anyio
async def test_a_flood_of_bad_lines_is_counted_exactly_and_logged_a_few_times(harness: Harness):
    (harness.log_dirs[0] / "flood.jsonl").write_text("not json\n" * 5000 + ev("after"))
    with captured_logs() as logs_seen:
        stats = await harness.analyzer().sync()
    assert stats.malformed_lines == 5000 and "after" in list_block_ids(harness.conn)
    warned = [e for e in logs_seen if e["event"] == "malformed log line skipped"]
    assert [e["line"] for e in warned] == list(range(1, 11)), "the first ten bad lines, the rest throttled"
