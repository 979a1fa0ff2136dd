"""``learnerd train DOC`` refuses what it cannot train with one clear line and exit status 1; the
RPC options of ``learnerd run`` refuse to start without a token."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from learnerd.store.dlm import new_ulid
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.evaluation import QUICK_EVALUATION, state_with_models
from tests.support.in_process import run_cli_here
from tests.support.pipeline import cli_env, learnerd_command, run_cli

IN_PROCESS = pytest.mark.usefixtures("one_torch_thread")
"""A refusal test runs ``learnerd train`` in this process (:func:`~tests.support.in_process.run_cli_here`: no
subprocess's imports); the command itself, in a subprocess, is the last test's."""


def train(tmp_path: Path, doc: Path, *extra: str):
    return run_cli_here("train", str(doc), "--state-dir", str(tmp_path / "state"), *extra, check=False)


@IN_PROCESS
def test_an_invalid_document_exits_1_with_its_line(tmp_path: Path):
    doc = qa_document(tmp_path / "broken.dlm", QA_PAIRS[:1])
    doc.write_text(doc.read_text() + "### Q\nno answer yet\n")
    proc = train(tmp_path, doc)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    lines = doc.read_text().splitlines()
    assert line.startswith(f"learnerd train: error: {doc}:{lines.index('no answer yet')}: ")
    assert "### Q without a matching `### A`" in line


@pytest.mark.parametrize(
    ("frontmatter", "needle"),
    [
        ("base_model: smollm2-13m\n", "base_model 'smollm2-13m' is not a built-in model, a dlm registry key"),
        ("base_model: hf:HuggingFaceTB/SmolLM2-135M\n", "is not in the Hugging Face cache"),
        ("base_model: learnerd/tiny-llama\ntraining:\n  lora_r: 0\n", "training.lora_r must be in 1..256, not 0"),
        ("base_model: learnerd/tiny-llama\ntraining:\n  optimizer: paged_adamw_8bit\n", "needs a GPU"),
    ],
)
@IN_PROCESS
def test_an_unknown_base_or_untrainable_block_exits_1(tmp_path: Path, frontmatter: str, needle: str):
    doc = tmp_path / "doc.dlm"
    doc.write_text(f"---\ndlm_id: {new_ulid()}\n{frontmatter}---\n::instruction::\n### Q\nq?\n### A\na\n")
    proc = train(tmp_path, doc)
    assert proc.returncode == 1 and needle in proc.stderr and "Traceback" not in proc.stderr
    adapters = tmp_path / "state" / "adapters"
    assert not adapters.exists() or not any(adapters.iterdir())


@IN_PROCESS
def test_a_missing_document_exits_1(tmp_path: Path):
    proc = train(tmp_path, tmp_path / "nope.dlm")
    assert proc.returncode == 1 and "no such document" in proc.stderr


def test_run_refuses_rpc_without_a_token(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("LEARNERD_PROBE_TOKEN", raising=False)
    proc = run_cli("run", "--once", "--state-dir", str(tmp_path / "s"), "--listen-rpc", "127.0.0.1:0", check=False)
    assert proc.returncode == 1 and "LEARNERD_PROBE_TOKEN" in proc.stderr
    proc = run_cli("run", "--once", "--state-dir", str(tmp_path / "s"), "--listen-rpc", "nowhere", check=False)
    assert proc.returncode == 2 and "HOST:PORT" in proc.stderr


def test_train_off_a_terminal_prints_progress_lines_with_steps_and_time_left(tmp_path: Path, models_dir: Path):
    doc = qa_document(tmp_path / "notes.dlm", QA_PAIRS[:4])
    state = state_with_models(tmp_path, models_dir)  # the session's tiny model, not built again
    config = tmp_path / "config.toml"
    config.write_text(QUICK_EVALUATION)  # the subject is training's progress lines, not the evaluation after it
    out = tmp_path / "out"
    with out.open("w") as sink:  # `learnerd train DOC > out 2>&1`: stdout is a file, not a terminal
        proc = subprocess.run(
            learnerd_command("train", str(doc), "--state-dir", str(state), "--config", str(config)),
            env=cli_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=300,
        )
    text = out.read_text()
    assert proc.returncode == 0, text[-2000:]
    lines = [line for line in text.splitlines() if line.startswith("train notes.dlm: ")]
    assert lines[0] == "train notes.dlm: starting"
    phases = [re.match(r"train notes.dlm: ([a-z ]+?) \d", line) for line in lines[1:]]
    seen = list(dict.fromkeys(m.group(1) for m in phases if m))
    assert seen == ["start loss", "training step", "final loss"], lines  # loading base: no count
    steps = r"training step \d+/(\d+) · [\d.]+ s/step · loss [\d.]+ · cpu \d+% · rss [\d.]+ [MG]iB .*· ETA "
    assert re.search(steps, "\n".join(lines)), "the pace, the loss, the process's CPU share and memory, the ETA"
    total = int(re.search(r"training step \d+/(\d+)", "\n".join(lines)).group(1))
    assert lines[-1].startswith("train notes.dlm: final loss ") and " · done in " in lines[-1]
    assert len(lines) <= 2 + 5 * 10 + total  # a line per phase, per tenth or per interval, never more than per step
    assert "\x1b[" not in text  # no terminal escapes in a file
