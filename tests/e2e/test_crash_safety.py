"""Crash safety: ``kill -9`` the daemon at random moments while it ingests the tldr subset, restart it,
and end in exactly the state of an uninterrupted run — no lost block, no duplicate example, vector or
probe section, and a watermark that never passes a line whose block is not committed. On either store
backend (the uninterrupted reference run is always on SQLite: the session's ``tldr_once``)."""

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
from tests.support.pipeline import TldrRun, open_store, run_once, store_args, table_rows

KILLS = 10
SEED = 20261121


def lines_of(directory: Path) -> list[str]:
    return [line for p in sorted(directory.glob("*.jsonl")) for line in p.read_text().splitlines(keepends=True)]


def start_daemon(state: Path, logs: Path, stderr, store_url: str | None) -> subprocess.Popen:
    argv = learnerd_command(
        "run", "--log-level", "info", "--no-train",
        "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(state / "docs"), *store_args(store_url),
    )  # fmt: skip
    return subprocess.Popen(argv, env=cli_env(), stdout=subprocess.DEVNULL, stderr=stderr)


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
def test_kill_9_at_random_moments_converges_to_the_uninterrupted_state(tldr_once: TldrRun, tmp_path, store_url):
    source, n_blocks, reference = tldr_once.logs, tldr_once.blocks, tldr_once.state

    rng = random.Random(SEED)
    lines = lines_of(source)
    logs, state = tmp_path / "logs", tmp_path / "state"
    logs.mkdir()
    log = logs / "tldr.jsonl"
    written = int(len(lines) * 0.4)  # a backlog for the first start, the rest arrives while it runs
    log.write_text("".join(lines[:written]))
    events_checked = 0
    with open(tmp_path / "daemon.log", "ab") as daemon_log:
        for _ in range(KILLS):
            daemon = start_daemon(state, logs, daemon_log, store_url)
            kill_at = time.monotonic() + rng.uniform(1.0, 12.0)
            while time.monotonic() < kill_at:
                if written < len(lines):
                    chunk = lines[written : written + rng.randint(1, 8)]
                    with log.open("a") as f:
                        f.write("".join(chunk))
                    written += len(chunk)
                time.sleep(0.05)
            assert daemon.poll() is None, f"the daemon exited on its own ({daemon.returncode}); see daemon.log"
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
            if store_url or (state / "learnerd.db").exists():
                events_checked += assert_watermarks_cover_only_committed_blocks(state, store_url)
    with log.open("a") as f:
        f.write("".join(lines[written:]))

    summary = run_once(state, logs, store_url=store_url)
    assert summary["blocks"] == summary["examples"] == summary["vectors"] == n_blocks
    assert events_checked > 0, "no kill landed after ingestion had started"
    got, want = comparable(state, store_url), comparable(reference)
    for key in ("blocks", "examples", "embedding_keys", "sections"):
        assert got[key] == want[key], f"{key} differ from the uninterrupted run"
    # Batches of other sizes may round differently in the last bits; the text hashes above are exact.
    np.testing.assert_allclose(got["vectors"], want["vectors"], atol=1e-5)
