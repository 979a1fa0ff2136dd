"""A crash after a 200 loses no probe: ``kill -9`` the daemon right after its RPC server accepted a burst of
probes (before any training cycle drained them); the next start writes every one into the document, once."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import aiohttp
import anyio
import pytest

from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.probe_journal import ProbeJournal
from tests.conftest import cli_env, learnerd_command
from tests.support.daemon_process import free_port
from tests.support.pipeline import run_cli

TOKEN = "crash-test-token"
CONFIG = """
[training]
num_threads = 1
niceness = 0
warm_spare = false
debounce_s = 600.0       # no cycle drains the probes before the kill
debounce_max_s = 600.0
[evaluation]             # the gate's evaluation is not the subject: its quickest form
null_runs = 0
max_prompts = 1
"""


def wait_listening(log: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                if json.loads(line).get("event") == "rpc listening":
                    return
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(log.read_text()[-3000:])


async def push(url: str, prompts: list[str]) -> Counter:
    statuses: Counter = Counter()
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def client(mine: list[str]) -> None:
        async with aiohttp.ClientSession() as session:
            for prompt in mine:
                payload = {"method": "inject_probe", "params": {"prompt": prompt, "reference": "ok", "tags": []}}
                async with session.post(url, json=payload, headers=headers) as r:
                    statuses[r.status] += 1

    async with anyio.create_task_group() as tg:
        for c in range(4):
            tg.start_soon(client, prompts[c::4])
    return statuses


@pytest.mark.slow
def test_probes_acknowledged_before_a_kill_9_all_reach_the_document(tmp_path: Path, models_dir: Path):
    state, docs = tmp_path / "state", tmp_path / "docs"
    state.mkdir()
    (state / "models").symlink_to(models_dir)
    config = tmp_path / "learnerd.toml"
    config.write_text(CONFIG)
    common = ["--config", str(config), "--state-dir", str(state), "--docs-dir", str(docs)]
    port = free_port()
    log = tmp_path / "daemon.log"
    prompts = [f"Pushed question number {i}?" for i in range(40)]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            learnerd_command("run", *common, "--listen-rpc", f"127.0.0.1:{port}"),
            env=cli_env(LEARNERD_PROBE_TOKEN=TOKEN), stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        try:
            wait_listening(log, proc)
            statuses = anyio.run(push, f"http://127.0.0.1:{port}/rpc", prompts)
            proc.send_signal(signal.SIGKILL)  # right after the last 200
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert statuses == {200: 40}
    journal = ProbeJournal(state / "journals" / "injected-probes.jsonl")
    assert sorted(p.prompt for p in journal.pending()) == sorted(prompts)
    journal.close()
    doc = docs / "learned.dlm"
    assert not doc.exists()  # nothing was drained before the crash

    run_cli("run", "--once", *common, "--log-level", "warning")  # the next start replays the journal
    document = read_document(doc)
    questions = Counter(s.qa_pairs()[0].question for s in document.auto_sections("rpc-inject/"))
    assert questions == Counter(dict.fromkeys(prompts, 1))
    assert ProbeJournal(state / "journals" / "injected-probes.jsonl").pending() == []
    current = AdapterStore(state / "adapters").current(document.frontmatter.dlm_id)
    assert current is not None and set(current.metadata().section_ids) == {s.section_id for s in document.sections}
