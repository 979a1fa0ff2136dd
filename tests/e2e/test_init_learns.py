"""``learnerd init DIR --log-dir examples/logs`` then ``learnerd run --once --config DIR/config.toml``, exactly
as a person types them from the top of the checkout: the document ``init`` writes has no ``training`` block,
so learnerd's recipe for the built-in model applies and the adapter answers at least 18 of the 20 probes
(the base none), with no warning in the summary; ``learnerd generate`` then answers from that adapter and
prints no warning. A document whose own ``training`` block trains too little is named in the summary, with
the cause (its key) and the fix."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.support.in_process import run_cli_here

pytestmark = pytest.mark.slow

PASSED = re.compile(r"probes passed learned\.dlm v0001 \(as the gate counts\)\s*│\s*(\d+)/20")
RECALL = re.compile(r"probe recall learned\.dlm (v\d+) \(base → adapter\)\s*│\s*(\d+)/(\d+) → (\d+)/(\d+)")


def learnerd(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``learnerd ARGS`` from the top of the checkout, its state under ``home`` ($XDG_STATE_HOME)."""
    env = cli_env(XDG_STATE_HOME=str(home / "state"), XDG_CONFIG_HOME=str(home / "xdg"))
    env.pop("LEARNERD_CONFIG", None)
    proc = subprocess.run(learnerd_command(*args), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def learnerd_here(home: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`learnerd` in this process (:func:`tests.support.in_process.run_cli_here`): the same command, directory
    and environment, for a test whose subject is what a command prints, not the process that prints it."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    monkeypatch.delenv("LEARNERD_CONFIG", raising=False)
    proc = run_cli_here(*args, check=False)
    assert proc.returncode == 0, f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def test_init_then_run_once_learns_the_example_logs(tmp_path: Path):
    project = tmp_path / "project"
    init = learnerd(tmp_path, "init", str(project), "--log-dir", "examples/logs")
    assert "base model: learnerd/tiny-llama, the built-in random model" in init.stdout

    run = learnerd(tmp_path, "run", "--once", "--config", str(project / "config.toml"))
    recall = RECALL.search(run.stdout)
    assert recall is not None, run.stdout
    version, before, probes, after, probes_again = recall.groups()
    assert (version, int(probes), int(probes_again), int(before)) == ("v0001", 20, 20, 0)
    passed = PASSED.search(run.stdout)
    assert passed is not None and 18 <= int(after) <= int(passed.group(1)), run.stdout
    assert "warning:" not in run.stdout and "training.undertrained" not in run.stderr
    for line in run.stderr.splitlines():  # the JSON log: no terminal escapes, raw or inside a value
        assert "\x1b" not in line and "\\u001b" not in line, line

    document = project / "docs" / "learned.dlm"
    question = "List the pods in the dev namespace"
    answer = learnerd(tmp_path, "generate", "--config", str(project / "config.toml"), str(document), question)
    assert answer.stdout.strip(), "an answer from the adapter"
    assert "warning" not in answer.stderr.lower(), answer.stderr


@pytest.mark.usefixtures("one_torch_thread")
def test_a_document_that_trains_too_little_is_named_in_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project = tmp_path / "project"  # the commands in this process: the test above runs them as a person does
    learnerd_here(tmp_path, monkeypatch, "init", str(project), "--log-dir", "examples/logs")
    document = project / "docs" / "learned.dlm"
    text = document.read_text()
    document.write_text(
        text.replace(
            "base_model: learnerd/tiny-llama\n", "base_model: learnerd/tiny-llama\ntraining:\n  num_epochs: 1\n", 1
        )
    )
    with (project / "config.toml").open("a") as config:  # the warning is the training's: no noise adapters
        config.write("\n[evaluation]\nnull_runs = 0\nmax_prompts = 1\n")

    run = learnerd_here(tmp_path, monkeypatch, "run", "--once", "--config", str(project / "config.toml"))
    warning = (
        "warning: learned.dlm: undertrained: 6 optimizer steps (< 50)",
        "cause: the document's training block sets num_epochs: 1; "
        "fix: delete it to use learnerd's recipe for this base (360 steps over 21 rows)",
    )
    line = next((line for line in run.stdout.splitlines() if line.startswith("warning:")), "")
    assert line.startswith(warning[0]) and line.endswith(warning[1]), run.stdout
