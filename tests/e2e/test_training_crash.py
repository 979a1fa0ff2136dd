"""``kill -9`` of the daemon in the middle of a training cycle: the previous ``current`` adapter still
loads, nothing half-written is left to be picked, and the next start retrains the document."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.loader import load_adapter
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.conftest import cli_env, learnerd_command
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS
from tests.support.documents import qa_document
from tests.support.in_process import run_cli_here

CONFIG = """
[training]
num_threads = 1
niceness = 0
warm_spare = false
debounce_s = 0.3
[evaluation]             # the gate's evaluation is not the subject: its quickest form
null_runs = 0
max_prompts = 1
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for_event(log: Path, event: str, proc: subprocess.Popen, timeout: float = 180.0) -> dict:
    """The first structlog event named ``event`` in the daemon's JSON log (stderr is not a terminal)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == event:
                    return record
        assert proc.poll() is None, f"the daemon exited early:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no {event} in the daemon's log:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_kill_9_during_training_keeps_the_previous_adapter_and_the_next_start_retrains(
    tmp_path: Path, models_dir: Path, one_torch_thread
):
    state, docs = tmp_path / "state", tmp_path / "docs"
    state.mkdir()
    (state / "models").symlink_to(models_dir)
    config = tmp_path / "learnerd.toml"
    config.write_text(CONFIG)
    common = ["--config", str(config), "--state-dir", str(state)]
    doc = qa_document(docs / "notes.dlm", QA_PAIRS[:3], training={"learning_rate": 1e-2, "max_steps": 2})
    dlm_id = read_document(doc).frontmatter.dlm_id
    run_cli_here("train", str(doc), *common)  # in this process: only the daemon's kill -9 is a subprocess's subject
    store = AdapterStore(state / "adapters")
    assert store.current(dlm_id).name == "v0001"

    # a person adds a section and asks for a long cycle; the daemon starts training it
    qa_document(doc, [*QA_PAIRS[:3], EXTRA_QA_PAIRS[0]], training={"learning_rate": 1e-2, "max_steps": 10**6},
                dlm_id=dlm_id)  # fmt: skip
    log = tmp_path / "daemon.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            learnerd_command("run", *common, "--docs-dir", str(docs), "--log-level", "info"),
            env=cli_env(), stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        try:
            started = wait_for_event(log, "training.started", proc)
            wait_for_event(log, "training.progress", proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    trainer = started["pid"]
    deadline = time.monotonic() + 30
    while pid_alive(trainer) and time.monotonic() < deadline:  # the orphaned trainer sees its stdin close
        time.sleep(0.1)
    assert not pid_alive(trainer), "the training process outlived its daemon"

    versions_dir = store.doc_dir(dlm_id) / "versions"
    assert [v.name for v in store.list_versions(dlm_id)] == ["v0001"]
    current = store.current(dlm_id)
    assert current.name == "v0001" and current.metadata().steps == 2
    base = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)
    model, _ = load_model_directory(base.path)
    assert load_adapter(model, current) is not None  # still loads

    # the next start (a short budget this time) recovers the store and retrains the changed rows
    qa_document(doc, [*QA_PAIRS[:3], EXTRA_QA_PAIRS[0]], training={"learning_rate": 1e-2, "max_steps": 2},
                dlm_id=dlm_id)  # fmt: skip
    run_cli_here("run", "--once", *common, "--docs-dir", str(docs), "--log-level", "warning")
    assert [v.name for v in store.list_versions(dlm_id)] == ["v0001", "v0002"]
    v2 = store.current(dlm_id).metadata()
    assert v2.section_ids == tuple(s.section_id for s in read_document(doc).sections)  # trained on the edit
    assert not [p for p in versions_dir.iterdir() if p.name.startswith(".staging-")]
