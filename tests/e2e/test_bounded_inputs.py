"""``learnerd run --once --no-train`` over hostile inputs beside the quick start's log (examples/logs): an 8-row
atuin ``history.db`` of a few KB whose every row has a 400 MB virtual generated column (``zeroblob``), and five
block-log commands of 3.5 MB each (17.5 MB: more than the 16 MiB a document may hold). The daemon's own peak
memory (anonymous: its heap and tensors) stays under 1 GiB and it learns what it should: the quick start's
examples and atuin's rows with an intent, none of the 3.5 MB commands; the document parses. Then every file and
directory of the state directory is its user's only (docs/privacy.md)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell
from learnerd.store.dlm import read_document
from learnerd.store.dlm.document import MAX_DOCUMENT_BYTES
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.support.assistant_logs import build_history
from tests.support.pipeline import table_rows

# the secret redactor and the command parser read every byte of the five lines (17.5 MB): minutes on shared cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

MAX_ANONYMOUS_BYTES = 1024**3
"""1 GiB (issue 60) of anonymous memory (``RssAnon``: heap, tensors, the lines read), the daemon's own: 435 MiB
measured alone; the unbounded reader reached 6.1 GB."""
MAX_RSS_BYTES = 3 * 1024**3 // 2
"""1.5 GiB of peak RSS (``ru_maxrss``), which also counts the pages of shared libraries mapped in (libtorch_cpu.so
alone is 434 MB): how many depends on what other processes brought into the page cache, so it is the coarser
bound. Alone: 624 MiB (435 anonymous, 201 file-backed); in a fresh-clone run of the whole suite, 1,293 MiB."""
SAMPLE_INTERVAL_S = 0.05
HUGE_COMMANDS = 5
HUGE_BYTES = 3_500_000
LEARNABLE_ATUIN_ROWS = "SELECT count(*) FROM history WHERE intent IS NOT NULL AND exit = 0 AND deleted_at IS NULL"


@dataclass(frozen=True)
class Run:
    state: Path
    summary: dict
    peak_rss_bytes: int
    peak_anonymous_bytes: int
    learnable_atuin_rows: int


def _hostile_logs(peer_data: Path, logs: Path) -> int:
    """Write the hostile files into ``logs``; how many atuin rows are learnable (an intent, exit 0)."""
    history = build_history(peer_data, logs / "atuin")
    with sqlite3.connect(history) as db:
        learnable = db.execute(LEARNABLE_ATUIN_ROWS).fetchone()[0]
        db.execute("ALTER TABLE history ADD COLUMN pad BLOB GENERATED ALWAYS AS (zeroblob(400000000)) VIRTUAL")
        db.execute("VACUUM")
    assert history.stat().st_size < 64 * 1024
    with open(logs / "huge.jsonl", "w") as f:
        for n in range(HUGE_COMMANDS):
            f.write(event_line("context", f"huge-{n}", 1714564800.0 + n, cells=[Cell("markup", f"Print blob {n}")]))
            command = f"echo {n} " + "ab" * (HUGE_BYTES // 2)
            f.write(event_line("executed", f"huge-{n}", 1714564801.0 + n, cell=Cell("code", command), exit_code=0))
        f.write(event_line("context", "after", 1714564900.0, cells=[Cell("markup", "Show the disk usage here")]))
        f.write(event_line("executed", "after", 1714564901.0, cell=Cell("code", "du -sh ."), exit_code=0))
    return learnable


def _peak_anonymous(process: psutil.Process, peak: list[int]) -> None:
    """Keep in ``peak[0]`` the most anonymous memory (bytes: RSS less its file-backed and shared pages, Linux's
    ``RssAnon``) ``process`` held at any sample, every :data:`SAMPLE_INTERVAL_S` until it exits. The hostile lines
    are held for seconds each, so a 50 ms sampler sees what they cost."""
    while True:
        time.sleep(SAMPLE_INTERVAL_S)
        try:
            memory = process.memory_info()
        except psutil.Error:  # exited (a zombie or reaped)
            return
        peak[0] = max(peak[0], memory.rss - memory.shared)


def _run_once_measured(state: Path, logs: Path) -> tuple[dict, int, int]:
    """``learnerd run --once --json --no-train`` in a subprocess; its summary, its peak RSS in bytes (``wait4``'s
    rusage of that one child; ``ru_maxrss`` is in KiB on Linux) and its sampled peak anonymous memory in bytes."""
    command = learnerd_command(
        "run", "--once", "--json", "--no-train", "--log-level", "warning",
        "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(state / "docs"),
    )  # fmt: skip
    out, err = state.parent / "stdout", state.parent / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(command, env=cli_env(), stdout=stdout, stderr=stderr)
        anonymous = [0]
        sampler = threading.Thread(target=_peak_anonymous, args=(psutil.Process(proc.pid), anonymous))
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.join()
    assert proc.returncode == 0, err.read_text(errors="replace")[-4000:]
    return json.loads(out.read_text()), usage.ru_maxrss * 1024, anonymous[0]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory, peer_data: Path) -> Run:
    root = tmp_path_factory.mktemp("bounded")
    logs, state = root / "logs", root / "state"
    shutil.copytree(REPO_ROOT / "examples" / "logs", logs)
    learnable = _hostile_logs(peer_data, logs)
    summary, peak, anonymous = _run_once_measured(state, logs)
    return Run(state, summary, peak, anonymous, learnable)


def test_hostile_inputs_leave_memory_bounded_and_learning_going(hostile_run: Run):
    run = hostile_run
    anonymous, rss = run.peak_anonymous_bytes / 2**20, run.peak_rss_bytes / 2**20
    print(f"peak memory of learnerd run --once: {anonymous:.0f} MiB anonymous, {rss:.0f} MiB RSS")
    assert 0 < run.peak_anonymous_bytes < MAX_ANONYMOUS_BYTES, f"peak anonymous memory {anonymous:.0f} MiB"
    assert run.peak_anonymous_bytes <= run.peak_rss_bytes < MAX_RSS_BYTES, f"peak RSS {rss:.0f} MiB"
    by_source = "SELECT b.source, count(*) FROM examples e JOIN blocks b ON b.id = e.id GROUP BY 1"
    learned = dict(table_rows(run.state, by_source))
    assert learned["atuin"] == run.learnable_atuin_rows > 0 and learned["learnerd"] > 1
    assert table_rows(run.state, "SELECT answer FROM examples WHERE id = 'after'") == [("du -sh .",)]
    huge = table_rows(run.state, "SELECT id FROM examples WHERE id LIKE 'huge-%'")
    assert huge == [] and len(table_rows(run.state, "SELECT id FROM blocks WHERE id LIKE 'huge-%'")) == HUGE_COMMANDS
    document = run.state / "docs" / "learned.dlm"
    assert document.stat().st_size < MAX_DOCUMENT_BYTES
    assert len(read_document(document).auto_sections("learnerd/")) == sum(learned.values())
    assert run.summary["analyzer"]["errors"] == 0 and run.summary["analyzer"]["oversized_lines"] == 0


def test_every_file_of_the_state_directory_is_its_users_only(hostile_run: Run):
    loose = []
    for directory, dirs, files in os.walk(hostile_run.state):
        for name in (*dirs, *files):
            path = Path(directory) / name
            st = os.lstat(path)
            wanted = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if stat.S_IMODE(st.st_mode) & ~wanted:
                loose.append(f"{path.relative_to(hostile_run.state)} {oct(stat.S_IMODE(st.st_mode))}")
    assert stat.S_IMODE(os.lstat(hostile_run.state).st_mode) == 0o700
    assert (hostile_run.state / "learnerd.db").exists() and loose == []
