"""``learnerd evolve`` with ``[steering.server]``: a real server process started by the configured
command (``python -m tests.support.openai_server``, a stand-in for SGLang or vLLM speaking OpenAI's chat
completions) is restarted with each iteration's steering file, waited for through its health URL (503
while it loads), answers the minibatch, and is stopped when the run ends."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from tests.conftest import cli_env, learnerd_command
from tests.support.steering import document_text

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_iteration_restarts_the_server_with_its_deltas_and_answers_through_it(tmp_path):
    doc = tmp_path / "qa.dlm"
    doc.write_text(document_text(), encoding="utf-8")
    port = _free_port()
    start = (
        f"exec {sys.executable} -m tests.support.openai_server --port {port} --steering {{steering}} --ready-after 0.5"
    )
    config = tmp_path / "config.toml"
    config.write_text(
        f'[steering.server]\nstart = {json.dumps(start)}\nhealth_url = "http://127.0.0.1:{port}/health"\n'
        "ready_timeout_s = 120\n",
        encoding="utf-8",
    )
    run_dir = tmp_path / "run"
    result = subprocess.run(
        learnerd_command(
            "evolve", str(doc), "--config", str(config), "--state-dir", str(tmp_path / "state"),
            "--run-dir", str(run_dir), "--iterations", "3", "--minibatch-size", "2", "--clusters", "4",
            "--max-new-tokens", "8", "--json", "--log-level", "warning",
        ),
        env=cli_env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "finished"

    history = json.loads((run_dir / "history.json").read_text())["iterations"]
    assert len(history) == 3 and history[0]["deltas"]["0"] == 0.0
    for entry in history:  # every answer came from a server started with that iteration's deltas
        for response in entry["responses"]:
            assert response["response"] == f"eos={entry['deltas']['0']!r} {response['question']}"
            assert response["tokens"] > 0
    assert history[1]["deltas"] != history[0]["deltas"]  # so the restarts are told apart

    lines = (run_dir / "server.log").read_text().splitlines()
    starts = [re.fullmatch(r"started pid=(\d+) steering=(\S+) eos=(\S+)", line) for line in lines]
    starts = [m for m in starts if m]
    assert [float(m[3]) for m in starts] == [h["deltas"]["0"] for h in history]  # one start per iteration
    assert {m[2] for m in starts} == {str(run_dir / "deltas_current.json")}
    pids = [int(m[1]) for m in starts]
    assert [line for line in lines if line.startswith("stopping")] == [f"stopping pid={p} on SIGTERM" for p in pids]
    assert "health 503" in lines and "health 200" in lines  # waited while it was loading
    assert not any(_alive(p) for p in pids)
    assert json.loads((run_dir / "run.json").read_text())["server"] == start
