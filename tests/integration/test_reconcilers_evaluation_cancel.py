"""The evaluation reconciler on a real adapter: progress events while it runs, and a cancelled reconcile
stops its evaluation thread at the next batch before it returns, writing nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
import structlog

from learnerd.daemon.config import Config
from learnerd.eval.history import report_path
from learnerd.eval.probes.base import EvalOptions
from learnerd.eval.suite import total_steps
from learnerd.reconcilers.evaluation import evaluation_reconciler
from learnerd.store.adapters import AdapterStore
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import DLM_ID, qa_document, state_with_models
from tests.support.training import train_document

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory, models_dir) -> Path:
    """A state and ``docs/qa.dlm`` whose v0001 is trained and promoted, not yet evaluated: trained once for the
    module (every test evaluates the same version; each works on a copy, for an evaluation writes its report)."""
    root = tmp_path_factory.mktemp("trained")
    state = state_with_models(root, models_dir)
    (root / "docs").mkdir()
    doc = root / "docs" / "qa.dlm"
    doc.write_text(qa_document(QA_PAIRS[:4], epochs=1, per_section=2))
    outcome = anyio.run(train_document, AdapterStore(state / "adapters"), doc, models_dir)
    assert outcome.version is not None and not report_path(outcome.version).exists()
    return root


@pytest.fixture
def trained(trained_once, tmp_path):
    root = tmp_path / "trained"
    shutil.copytree(trained_once, root, symlinks=True)  # the model link kept
    state, docs = root / "state", root / "docs"
    version = AdapterStore(state / "adapters").current(DLM_ID)
    config = Config(state_dir=state, docs_dirs=[docs])
    config.evaluation.num_threads = 1
    return config, docs / "qa.dlm", version


def events(logs: list[dict], name: str) -> list[dict]:
    return [e for e in logs if e["event"] == name]


async def test_progress_events_then_a_report(trained):
    config, doc, version = trained
    config.evaluation.null_runs = 1
    with structlog.testing.capture_logs() as logs:
        await evaluation_reconciler(config).reconcile(str(doc))
    steps = events(logs, "evaluation.progress")
    total = total_steps(EvalOptions(null_runs=1))
    assert [e["step"] for e in steps] == list(range(1, total + 1)) and {e["of"] for e in steps} == {total}
    assert [e["done"] for e in steps][-3:] == ["paraphrase_invariance", "calibration_drift", "answer_retention"]
    assert events(logs, "evaluation.started")[0]["threads"] == 1
    assert report_path(version).is_file() and events(logs, "evaluation.finished")


async def test_a_cancelled_evaluation_stops_before_the_reconcile_returns(trained):
    config, doc, version = trained
    reconciler = evaluation_reconciler(config)
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reconciler.reconcile, str(doc))
            while not events(logs, "evaluation.progress"):  # the evaluation is under way
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        await anyio.sleep(1.0)  # a thread left running would go on logging progress here, then write the report
    names = [e["event"] for e in logs]
    assert names[-1] == "evaluation.cancelled"  # logged once the thread stopped: nothing ran after it
    assert len(events(logs, "evaluation.progress")) < total_steps(reconciler.options)
    assert not events(logs, "evaluation.finished") and not report_path(version).exists()


@pytest.mark.timeout(120)  # before the fix, the reconcile waited forever for a thread that never began
async def test_a_reconcile_cancelled_before_its_thread_began_returns_and_evaluates_nothing(trained):
    config, doc, version = trained
    reconciler = evaluation_reconciler(config)
    threads = anyio.to_thread.current_default_thread_limiter()  # this event loop's worker threads
    threads.total_tokens = 1
    await threads.acquire()  # the only one taken: the reconcile's work waits for a worker thread
    try:
        with structlog.testing.capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reconciler.reconcile, str(doc))
                await anyio.wait_all_tasks_blocked()
                tg.cancel_scope.cancel()
    finally:
        threads.release()
    await anyio.to_thread.run_sync(lambda: None)  # a worker thread ran after the release: the work was not queued
    assert [e["event"] for e in logs] == ["evaluation.cancelled"]
    assert not report_path(version).exists() and reconciler.changes == {}
