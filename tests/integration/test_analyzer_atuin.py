"""The analyzer over atuin's ``history.db`` (built from ../shared/peer-data/assistant-logs/atuin's composed SQL,
atuin's own schema): rows read read-only by rowid while atuin writes, vacuums and locks the database."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import anyio
import pytest

from learnerd.analyzer import atuin
from learnerd.analyzer.sqlite_source import read_rows
from learnerd.store.blocks import Cell, get_block, list_block_ids
from tests.support.analyzer import Harness, append, captured_logs
from tests.support.assistant_logs import build_history

# Read from history-composed.sql by hand: 20 rows, one soft-deleted ('echo $PATH'), one still running
# ('make bench', exit and duration -1), six agent rows with an intent.
ROWS = 20
BLOCKS = 19
WITH_INTENT = 6
RUNNING = "atuin:0199f2a1ea307a1b8c2d3e4f5a6b7c14"
LAST_START_S = 1761302300  # 'make bench'
COLUMNS = (
    "id, timestamp, duration, exit, command, cwd, session, hostname, deleted_at, author, intent, shell, author_kind"
)


def add_row(path: Path, row_id: str, start_s: int, command: str, exit_status: int, cwd: str = "/home/dev") -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            f"INSERT INTO history ({COLUMNS})"
            " VALUES (?, ?, 1000, ?, ?, ?, 's', 'laptop:dev', NULL, 'dev', NULL, 'zsh', 1)",
            (row_id, start_s * 10**9, exit_status, command, cwd),
        )


@pytest.fixture
def history(peer_data: Path, tmp_path: Path) -> Path:
    return build_history(peer_data, tmp_path / "logs" / "atuin")


@pytest.mark.anyio
async def test_every_row_but_the_deleted_one_is_an_executed_block_and_the_file_is_untouched(
    history: Path, tmp_path: Path
):
    digest = hashlib.sha256(history.read_bytes()).hexdigest()
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0  # the running row is older than the hold: read as unknown
    stats = await harness.analyzer().sync()
    blocks = [get_block(harness.conn, i) for i in list_block_ids(harness.conn)]
    assert len(blocks) == BLOCKS and all(b.source == "atuin" and b.generated is None for b in blocks)
    with contextlib.closing(sqlite3.connect(f"file:{history}?mode=ro", uri=True)) as rows:
        sessions = dict(rows.execute("SELECT 'atuin:' || id, session FROM history").fetchall())
    assert all(b.session == sessions[b.id] for b in blocks), "each names its shell's $ATUIN_SESSION"
    assert sum(bool(b.context) for b in blocks) == WITH_INTENT
    retry = get_block(harness.conn, "atuin:0199f2a1d3807a1b8c2d3e4f5a6b7c09")
    assert retry.executed == Cell("code", "cargo build --release --locked", "bash") and retry.exit_code == 0
    assert retry.context == [Cell("markup", "Rebuild with the lockfile to confirm the fix", "markdown")]
    assert retry.event_time == 1761300431.0
    assert get_block(harness.conn, "atuin:0199f2a1cb407a1b8c2d3e4f5a6b7c05").exit_code == 127
    assert get_block(harness.conn, RUNNING).exit_code is None
    assert stats.lines_read == ROWS and stats.skipped_lines == 1 and stats.malformed_lines == 0
    assert harness.watermark(history) == (ROWS, ROWS)
    assert hashlib.sha256(history.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in history.parent.iterdir()) == ["history.db"]


@pytest.mark.anyio
async def test_rows_join_an_assistant_session_by_working_directory_and_time(history: Path, tmp_path: Path):
    claude = tmp_path / "logs" / "claude" / "s9.jsonl"
    claude.parent.mkdir(parents=True)
    turn = {"type": "user", "sessionId": "s9", "uuid": "u1", "cwd": "/home/dev/src/webapp"}
    turn |= {
        "timestamp": "2025-10-24T09:59:00Z",
        "message": {"role": "user", "content": "get the web app's tests green"},
    }
    append(claude, json.dumps(turn) + "\n")
    harness = Harness(tmp_path, [tmp_path / "logs" / "claude"])
    await harness.analyzer().sync()  # the session first
    harness.log_dirs.append(tmp_path / "logs" / "atuin")
    harness.clock.now = LAST_START_S + 7200.0
    await harness.analyzer().sync()
    intent = [Cell("markup", "get the web app's tests green", "markdown")]
    for joined in ("c01", "c03", "c04", "c06"):  # /home/dev/src/webapp, within 10 minutes of the turn
        assert get_block(harness.conn, f"atuin:0199f2a1{_ID[joined]}").context == intent
    assert get_block(harness.conn, "atuin:0199f2a1ddd07a1b8c2d3e4f5a6b7c0e").context == []  # 26 minutes later
    assert get_block(harness.conn, "atuin:0199f2a1d7a07a1b8c2d3e4f5a6b7c0b").context == [
        Cell("markup", "List the repository root", "markdown")  # its own intent, another directory
    ]


_ID = {
    "c01": "c3e07a1b8c2d3e4f5a6b7c01",
    "c03": "c7207a1b8c2d3e4f5a6b7c03",
    "c04": "c9307a1b8c2d3e4f5a6b7c04",
    "c06": "cd507a1b8c2d3e4f5a6b7c06",
}


@pytest.mark.anyio
async def test_new_rows_renumbered_rows_and_a_locked_database(history: Path, tmp_path: Path):
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0
    analyzer = harness.analyzer()
    await analyzer.sync()
    harness.take_notified()

    add_row(history, "new1", LAST_START_S + 60, "git push", 0)  # atuin writes while learnerd tails
    await analyzer.sync()
    assert harness.take_notified() == ["atuin:new1"] and harness.watermark(history) == (ROWS + 1, ROWS + 1)

    with sqlite3.connect(history) as db:  # rows deleted and vacuumed: the next row gets a lower rowid
        db.execute("DELETE FROM history WHERE rowid > 10")
    with sqlite3.connect(history) as db:
        db.execute("VACUUM")
    add_row(history, "new2", LAST_START_S + 120, "git fetch", 0)
    stats = await analyzer.sync()
    assert harness.take_notified() == ["atuin:new2"]  # read again from the start: only the new row is news
    assert stats.truncations == 1 and len(list_block_ids(harness.conn)) == BLOCKS + 2

    locker = sqlite3.connect(history, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # atuin in the middle of a write
    try:
        locker.execute(
            f"INSERT INTO history ({COLUMNS})"
            " VALUES ('new3', 1, 1, 0, 'ls', '/', 's', 'h', NULL, NULL, NULL, NULL, NULL)"
        )
        stats = await analyzer.sync()
        assert stats.errors == 1 and "atuin:new3" not in list_block_ids(harness.conn)
        locker.execute("COMMIT")
    finally:
        locker.close()
    await analyzer.sync()
    assert "atuin:new3" in list_block_ids(harness.conn)


@pytest.mark.anyio
async def test_a_running_command_holds_the_watermark_until_it_ends(history: Path, tmp_path: Path):
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 5.0  # 'make bench' started five seconds ago
    analyzer = harness.analyzer()
    await analyzer.sync()
    assert RUNNING not in list_block_ids(harness.conn) and harness.watermark(history) == (ROWS - 1, ROWS - 1)
    with sqlite3.connect(history) as db:  # atuin ends the row in place
        db.execute("UPDATE history SET exit = 2, duration = 9000000000 WHERE id = ?", (RUNNING.split(":")[1],))
    await analyzer.sync()
    assert get_block(harness.conn, RUNNING).exit_code == 2 and harness.watermark(history) == (ROWS, ROWS)


@pytest.mark.anyio
async def test_a_row_written_in_wal_mode_is_read_while_watching(history: Path, tmp_path: Path):
    with sqlite3.connect(history) as db:
        db.execute("PRAGMA journal_mode=WAL")  # atuin's own mode: a write changes history.db-wal only
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0
    async with anyio.create_task_group() as tg:
        await tg.start(harness.analyzer(rescan_interval_s=3600.0).run)
        harness.take_notified()
        writer = sqlite3.connect(history)  # held open, as atuin's daemon does: no checkpoint into the file
        try:
            add_row(history, "live1", LAST_START_S + 30, "cargo fmt --check", 1)
            await harness.wait_notified("atuin:live1")
        finally:
            writer.close()
        tg.cancel_scope.cancel()
    assert get_block(harness.conn, "atuin:live1").exit_code == 1


@pytest.mark.anyio
async def test_other_programs_db_files_are_skipped_as_not_logs(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    with sqlite3.connect(logs / "cache.db") as db:
        db.execute("CREATE TABLE entries (key TEXT, value TEXT)")
        db.execute("INSERT INTO entries VALUES ('a', 'b')")
    (logs / "berkeley.db").write_bytes(b"\x00\x06\x15\x61" + bytes(60))
    harness = Harness(tmp_path, [logs])
    analyzer = harness.analyzer()
    with captured_logs() as logs_seen:
        stats = await analyzer.sync()
        stats = await analyzer.sync()
    assert stats.errors == 0 and stats.files_tracked == 2 and list_block_ids(harness.conn) == []
    skipped = [e["file"] for e in logs_seen if e["event"].startswith("file is not a SQLite log")]
    assert sorted(Path(f).name for f in skipped) == ["berkeley.db", "cache.db"]  # once each


@pytest.mark.anyio
async def test_a_generated_column_is_never_read(history: Path, tmp_path: Path):
    """A virtual generated column of 400 MB a row (``zeroblob``) in a few-KB file: the read selects the reader's
    named columns only, so SQLite never makes its value and every row is learned as before."""
    with sqlite3.connect(history) as db:
        db.execute("ALTER TABLE history ADD COLUMN pad BLOB GENERATED ALWAYS AS (zeroblob(400000000)) VIRTUAL")
        db.execute("ALTER TABLE history ADD COLUMN huge TEXT GENERATED ALWAYS AS (printf('%.*c', 400000000, 'x'))")
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0
    stats = await harness.analyzer().sync()
    assert len(list_block_ids(harness.conn)) == BLOCKS and stats.oversized_lines == 0 and stats.errors == 0


@pytest.mark.anyio
async def test_rows_over_max_line_bytes_are_counted_and_skipped_and_the_rest_is_read(history: Path, tmp_path: Path):
    """A stored value over ``max_line_bytes`` (SQLite refuses to make it) and a row whose values add up to more
    are oversized rows, as oversized lines are: counted, skipped, and the rows after them read."""
    limit = 4096
    add_row(history, "big1", LAST_START_S + 10, "x" * (limit + 1), 0)  # one value over the limit
    add_row(history, "big2", LAST_START_S + 20, "y" * (limit - 100), 0, cwd="/" + "z" * 200)  # the row over it
    add_row(history, "after", LAST_START_S + 30, "git status", 0)
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0
    with captured_logs() as seen:
        stats = await harness.analyzer(max_line_bytes=limit).sync()
    ids = list_block_ids(harness.conn)
    assert "atuin:after" in ids and "atuin:big1" not in ids and "atuin:big2" not in ids
    assert stats.oversized_lines == 2 and stats.errors == 0 and harness.watermark(history) == (ROWS + 3, ROWS + 3)
    assert [e["event"] for e in seen].count("oversized log line skipped unread") == 2


@pytest.mark.anyio
async def test_a_batch_of_rows_stops_at_batch_max_bytes(history: Path, tmp_path: Path):
    """Rows are read in batches of at most ``batch_max_bytes`` (one row past it at most): many large rows are
    never held at once, and every one of them is still read."""
    for n in range(5):
        add_row(history, f"wide{n}", LAST_START_S + 10 + n, f"echo {n} " + "w" * 3000, 0)
    rows, top = read_rows(
        str(history), "history", ROWS, 1000, columns=atuin.COLUMNS, max_value_bytes=10_000, max_batch_bytes=4000
    )
    assert [r["id"] for r in rows] == ["wide0", "wide1"] and top == ROWS + 5
    harness = Harness(tmp_path, [tmp_path / "logs"])
    harness.clock.now = LAST_START_S + 7200.0
    stats = await harness.analyzer(batch_max_bytes=4000).sync()
    assert len(list_block_ids(harness.conn)) == BLOCKS + 5 and stats.lines_read == ROWS + 5
    assert harness.watermark(history) == (ROWS + 5, ROWS + 5)
