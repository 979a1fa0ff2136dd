"""Crash safety: ``kill -9`` the daemon at random moments while it ingests a tldr subset, restart it,
and end in exactly the state of an uninterrupted run — no lost block, no duplicate example, vector or
probe section, and a watermark that never passes a line whose block is not committed. On either store
backend (the uninterrupted reference run is always on SQLite, once per machine: :func:`tldr_reference`)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from learnerd.store.dlm import read_document
from tests.conftest import cli_env, learnerd_command
from tests.support.daemon_process import START_TIMEOUT_S, NotifyReceiver
from tests.support.pipeline import TldrRun, open_store, run_once, store_args, table_rows, tldr_run

BLOCKS = 300
"""The subset's size: 600 log lines, five embedding batches of 64 and several probe-section writes; the kills below
land across its whole ingestion (a bigger subset adds ingestion that no kill reaches, in the final run)."""
KILLS = 6
KILL_WINDOW_S = (0.0, 4.0)
"""Each start is killed at a moment drawn uniformly from this window after a point of its start-up, not at a
moment from its launch (which mostly hit the seconds it imports torch, before it touches the store). The
daemon's work has two phases: from its first log line (imports done, the controllers starting) it reads the
log and writes blocks, examples and probe sections while MiniLM loads; from ``READY=1`` (MiniLM loaded) it
embeds. The starts alternate between the two anchors, so three kills land in each phase whatever the host's
speed: six kills cut the 300 blocks' ingestion where ten from launch cut the 1,000 blocks' (many of those ten
before the store was touched)."""
SEED = 20261121


@pytest.fixture(scope="module")
def tldr_reference(peer_data: Path) -> TldrRun:
    """The first :data:`BLOCKS` blocks of the tldr pages and one uninterrupted run over them (read it only)."""
    return tldr_run(peer_data / "tldr", limit=BLOCKS, here=True)


def lines_of(directory: Path) -> list[str]:
    return [line for p in sorted(directory.glob("*.jsonl")) for line in p.read_text().splitlines(keepends=True)]


def start_daemon(state: Path, logs: Path, stderr, store_url: str | None, notify: NotifyReceiver) -> subprocess.Popen:
    argv = learnerd_command(
        "run", "--log-level", "info", "--no-train",
        "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(state / "docs"), *store_args(store_url),
    )  # fmt: skip
    env = cli_env(NOTIFY_SOCKET=notify.address)
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def logged(log: Path, since: int) -> bool:
    """Whether ``log`` has a complete line after byte ``since`` (this start's first log line)."""
    with log.open("rb") as f:
        f.seek(since)
        return b"\n" in f.read()


def assert_watermarks_cover_only_committed_blocks(state: Path, store_url: str | None) -> int:
    """Every event before each file's watermark is reflected in the committed block rows; returns the
    number of events checked."""
    conn = open_store(state, store_url)
    try:
        checked = 0
        for path, offset in conn.execute('SELECT path, "offset" FROM watermarks').fetchall():
            with open(path, "rb") as f:
                covered = f.read(offset)
            assert covered == b"" or covered.endswith(b"\n"), f"watermark of {path} is inside a line"
            for raw in covered.splitlines():
                event = json.loads(raw)
                column = {"context": "context_time", "executed": "executed_time"}[event["type"]]
                row = conn.execute(f"SELECT {column} FROM blocks WHERE id = ?", (event["block_id"],)).fetchone()
                assert row is not None, f"watermark passed block {event['block_id']} that is not committed"
                assert row[0] is not None and row[0] >= event["time"], f"{event['block_id']}: {column} not committed"
                checked += 1
        return checked
    finally:
        conn.close()


def comparable(state: Path, store_url: str | None = None) -> dict:
    content = "id, source, context, generated, executed, exit_code, eval_mode"
    embeddings = table_rows(
        state, "SELECT example_id, model, dim, text_hash, vector FROM embeddings ORDER BY example_id", store_url
    )
    sections = read_document(state / "docs" / "learned.dlm").auto_sections("learnerd/")
    sources = [s.harvest_source for s in sections]
    assert len(sources) == len(set(sources)), "a probe section is duplicated"
    return {
        "blocks": table_rows(state, f"SELECT {content} FROM blocks ORDER BY id", store_url),
        "examples": table_rows(state, "SELECT id, query, answer, language FROM examples ORDER BY id", store_url),
        "embedding_keys": [row[:4] for row in embeddings],
        "vectors": np.stack([np.frombuffer(row[4], dtype="<f4") for row in embeddings]),
        "sections": sorted((s.harvest_source, tuple(s.qa_pairs())) for s in sections),
    }


@pytest.mark.slow
def test_kill_9_at_random_moments_converges_to_the_uninterrupted_state(tldr_reference: TldrRun, tmp_path, store_url):
    source, n_blocks, reference = tldr_reference.logs, tldr_reference.blocks, tldr_reference.state

    rng = random.Random(SEED)
    lines = lines_of(source)
    logs, state = tmp_path / "logs", tmp_path / "state"
    logs.mkdir()
    log = logs / "tldr.jsonl"
    written = int(len(lines) * 0.4)  # a backlog for the first start, the rest arrives while it runs
    log.write_text("".join(lines[:written]))
    events_checked = 0
    daemon_log_path = tmp_path / "daemon.log"
    with open(daemon_log_path, "ab") as daemon_log:
        for kill in range(KILLS):
            notify, since = NotifyReceiver(), daemon_log_path.stat().st_size
            daemon = start_daemon(state, logs, daemon_log, store_url, notify)
            started, kill_at = time.monotonic(), None
            while kill_at is None or time.monotonic() < kill_at:
                if written < len(lines):
                    chunk = lines[written : written + rng.randint(1, 8)]
                    with log.open("a") as f:
                        f.write("".join(chunk))
                    written += len(chunk)
                if kill_at is None:  # even starts: from its first log line; odd ones: from READY=1
                    if notify.received("READY=1", 0.05) if kill % 2 else logged(daemon_log_path, since):
                        kill_at = time.monotonic() + rng.uniform(*KILL_WINDOW_S)
                    assert time.monotonic() - started < START_TIMEOUT_S, "not started in time; see daemon.log"
                time.sleep(0.05)
                assert daemon.poll() is None, f"the daemon exited on its own ({daemon.returncode}); see daemon.log"
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
            notify.close()
            if store_url or (state / "learnerd.db").exists():
                events_checked += assert_watermarks_cover_only_committed_blocks(state, store_url)
    with log.open("a") as f:
        f.write("".join(lines[written:]))

    # the last run, in this process (the restarts after the kills are the daemon's; this one drains what is left)
    summary = run_once(state, logs, store_url=store_url, here=True)
    assert summary["blocks"] == summary["examples"] == summary["vectors"] == n_blocks
    assert events_checked > 0, "no kill landed after ingestion had started"
    got, want = comparable(state, store_url), comparable(reference)
    for key in ("blocks", "examples", "embedding_keys", "sections"):
        assert got[key] == want[key], f"{key} differ from the uninterrupted run"
    # Batches of other sizes may round differently in the last bits; the text hashes above are exact.
    np.testing.assert_allclose(got["vectors"], want["vectors"], atol=1e-5)
