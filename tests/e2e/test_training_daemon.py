"""Training under a running daemon (in process, the real MiniLM, real files, real child processes): a
saved .dlm document becomes a new adapter version whose loss fell, promoted by the evaluation's gate; an
identical save trains nothing; an edit trains incrementally from the promoted version."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from learnerd.daemon.app import Daemon
from learnerd.daemon.config import config_from_dict
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS
from tests.support.documents import qa_document

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def daemon_config(tmp_path: Path, models_dir: Path, **training):
    state = tmp_path / "state"
    state.mkdir()
    (state / "models").symlink_to(models_dir)  # the session's built-in tiny model, built once
    settings = {"debounce_s": 0.3, "num_threads": 1, "niceness": 0, "warm_spare": False, "rescan_interval_s": 1.0}
    evaluation = {"null_runs": 0, "max_prompts": 1, "num_threads": 1}
    return config_from_dict(
        {"state_dir": "state", "docs_dirs": ["docs"], "training": {**settings, **training}, "evaluation": evaluation},
        base=tmp_path,
    )


async def wait_for(predicate, timeout: float = 180.0, what: str = "condition") -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.1)


async def test_an_edit_under_the_running_daemon_trains_a_new_version(tmp_path: Path, minilm, models_dir: Path):
    cfg = daemon_config(tmp_path, models_dir)
    daemon = Daemon(cfg, embedder=minilm)
    committed: list[tuple[str, str]] = []
    hook = daemon.training.on_committed  # the daemon's adapter_committed: observe its calls

    def observe(doc: str, version) -> None:
        committed.append((doc, version.name))
        hook(doc, version)

    daemon.training.on_committed = observe
    store = AdapterStore(cfg.layout.adapters_dir)
    doc = tmp_path / "docs" / "notes.dlm"
    stop = anyio.Event()
    training = daemon.controllers["training"]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run, stop)
            await anyio.sleep(0.5)
            qa_document(doc, QA_PAIRS[:4], training={"learning_rate": 1e-2, "max_steps": 6})  # a person saves
            dlm_id = read_document(doc).frontmatter.dlm_id
            await wait_for(lambda: committed)
            v1 = store.latest(dlm_id)
            meta = v1.metadata()
            assert v1.name == "v0001" and meta.final_loss < meta.start_loss
            assert committed == [(str(doc), "v0001")]
            await wait_for(lambda: store.current(dlm_id) == v1, what="v0001 promoted by the evaluation's gate")

            await wait_for(lambda: training.stats().in_flight == () and daemon.queues["training"].idle)
            before = training.stats().reconciles
            doc.write_bytes(doc.read_bytes())  # the same bytes saved again
            await wait_for(lambda: training.stats().reconciles > before)
            await wait_for(lambda: daemon.queues["training"].idle)
            assert [v.name for v in store.list_versions(dlm_id)] == ["v0001"] and len(committed) == 1

            with doc.open("a") as f:  # a real edit: one more section
                f.write(f"::instruction::\n### Q\n{EXTRA_QA_PAIRS[0][0]}\n\n### A\n{EXTRA_QA_PAIRS[0][1]}\n")
            await wait_for(lambda: len(committed) == 2)
            v2 = store.latest(dlm_id).metadata()
            assert v2.parent_version == 1 and v2.final_loss < v2.start_loss
            stop.set()
        summary = daemon.summary()
    finally:
        daemon.close()
    assert summary.changes["training"]["adapters_committed"] == 2
    assert summary.controllers["training"].failures == 0 and summary.controllers["training"].terminal == 0
