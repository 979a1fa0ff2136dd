"""Helpers of the evaluation end-to-end tests: Q/A documents, a state directory, the CLI."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

from learnerd.store.adapters import AdapterMetadata, AdapterStore, AdapterVersion
from tests.conftest import cli_env, learnerd_command
from tests.support.in_process import run_cli_here

DLM_ID = "01KPPJZWBDDDYRESSA0HESRDHS"
QUICK_EVALUATION = "[evaluation]\nnull_runs = 0\nmax_prompts = 1\nnum_threads = 1\n"
"""A config file's text for the quickest evaluation (fixed thresholds, no noise adapters, one prompt per
divergence probe): for ``learnerd train`` in a test whose subject is not the evaluation."""


def qa_document(pairs: Sequence[tuple[str, str]], *, epochs: int, per_section: int = 5, training: str = "") -> str:
    """A document of ``!probe`` pairs, ``per_section`` to an instruction section (as a person writes them),
    trained with dlm's keys at a rate the tiny model learns from (``learning_rate`` 1e-2); ``training``:
    more keys of the ``training`` block, as YAML lines indented by two spaces."""
    sections = [
        "::instruction::\n" + "".join(f"### Q !probe\n{q}\n\n### A\n{a}\n\n" for q, a in pairs[i : i + per_section])
        for i in range(0, len(pairs), per_section)
    ]
    block = f"training:\n  learning_rate: 0.01\n  num_epochs: {epochs}\n{training}"
    return f"---\ndlm_id: {DLM_ID}\nbase_model: learnerd/tiny-llama\n{block}---\n" + "".join(sections)


def state_with_models(parent: Path, models_dir: Path) -> Path:
    """``parent/state``, whose model cache is the session's (the built tiny models are found there)."""
    state = parent / "state"
    state.mkdir()
    os.symlink(models_dir, state / "models")
    return state


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``learnerd ARGS`` in a subprocess: one torch thread, a terminal wide enough for the tables."""
    env = cli_env(COLUMNS="200", OMP_NUM_THREADS="1")
    proc = subprocess.run(learnerd_command(*args), env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def run_cli_in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` in this process (:func:`tests.support.in_process.run_cli_here`: no interpreter's start, no
    torch import), under the same terminal width and offline Hugging Face; the caller sets torch's threads
    (``one_torch_thread``)."""
    wide = {"COLUMNS": "200", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with mock.patch.dict(os.environ, wide):
        return run_cli_here(*args, check=check)


def commit_version(store: AdapterStore, doc_key: str = DLM_ID, *, promote: bool = True) -> AdapterVersion:
    """Commit a placeholder adapter version (no weights: for tests that never load it), promoted unless
    ``promote`` is False (a candidate)."""
    with store.stage(doc_key) as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        meta = AdapterMetadata("learnerd/tiny-llama", "id", (), (), (), None, 0, 0.0, 0.0, 0, 42, {}, {}, "2026-01-01")
        version = store.commit(staging, meta)
    if promote:
        store.promote(version)
    return version
