"""An evaluation whose probes all error is a failed attempt, never a report: nothing is written or harvested,
the attempt is recorded (``failed``, the metrics hook), and the controller retries the key with its backoff
until an attempt succeeds. So is an evaluation whose model fails the loader's known-answer check. A stored
report whose probes all errored (as older learnerd wrote them, e.g. after a broken load) is evaluated again.
On the built-in tiny model with a LoRA adapter; the probes' forward passes are made to fail (as on a GPU that
runs out of memory) by a torch forward hook on the loaded model."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

from learnerd.daemon.config import Config
from learnerd.daemon.metrics import DaemonMetrics
from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.history import adapter_key, report_path
from learnerd.eval.report import ProbeResult, Report, Score, Verdict, load_report, write_report
from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.loader import ModelCheckError
from learnerd.reconcilers.evaluation import EvaluationFailed, evaluation_failure, evaluation_reconciler
from learnerd.runtime.controller import Controller
from learnerd.runtime.workqueue import RateLimitingQueue
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import qa_document, state_with_models
from tests.support.tied_model import commit_noise_adapter

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture
def setup(tmp_path: Path, models_dir: Path):
    """``(cfg, document, store, base)``: a document of 4 ``!probe`` pairs on the tiny model, harvesting on."""
    state = state_with_models(tmp_path, models_dir)
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "qa.dlm"
    doc.write_text(qa_document(QA_PAIRS[:4], epochs=1, per_section=2))
    cfg = Config(state_dir=state, docs_dirs=[docs])
    cfg.evaluation.null_runs = 0
    cfg.evaluation.max_prompts = 1
    cfg.evaluation.num_threads = 1
    cfg.evaluation.auto_harvest = True
    base = resolve_base_model("learnerd/tiny-llama", cache_dir=cfg.layout.models_dir)
    return cfg, doc, AdapterStore(cfg.layout.adapters_dir), base


async def until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await anyio.sleep(0.05)


@pytest.fixture
def out_of_memory(monkeypatch) -> dict[str, bool]:
    """While ``["on"]``, an evaluation's model raises from every forward pass after the preflight's two (the
    probes' passes: each probe then ends as an ``error`` result)."""
    failing = {"on": True}
    load = DifferentialBackend.load.__func__

    def load_failing(cls, *args, **kwargs):
        backend = load(cls, *args, **kwargs)
        if failing["on"]:
            passes = {"n": 0}

            def fail(module, inputs):
                passes["n"] += 1
                if passes["n"] > 2:
                    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

            backend.model.get_base_model().register_forward_pre_hook(fail)  # generate() calls it directly
        return backend

    monkeypatch.setattr(DifferentialBackend, "load", classmethod(load_failing))
    return failing


async def test_erroring_probes_leave_no_report_and_are_retried_until_an_attempt_succeeds(setup, out_of_memory):
    cfg, doc, store, base = setup
    version = commit_noise_adapter(store, adapter_key(read_document(doc)), base)
    document_before = doc.read_bytes()
    registry = CollectorRegistry()
    reconciler = evaluation_reconciler(cfg, on_failure=DaemonMetrics(registry).evaluation_failed)

    def failures() -> float | None:
        return registry.get_sample_value("learnerd_evaluation_failures_total", {"document": str(doc)})

    with pytest.raises(EvaluationFailed, match=r"v0001: every probe errored \(\d+\), first recall_.*out of memory"):
        await reconciler.reconcile(str(doc))
    assert not report_path(version).exists() and doc.read_bytes() == document_before  # nothing to harvest
    assert reconciler.failed[str(doc)].version == "v0001" and reconciler.failed[str(doc)].attempts == 1
    assert reconciler.failed_attempts()[str(doc)]["error"].startswith("EvaluationFailed: v0001: every probe errored")
    assert failures() == 1

    controller = Controller(reconciler, RateLimitingQueue("evaluation"), timeout_s=600.0, max_retries=30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add(str(doc))
        await until(lambda: reconciler.failed[str(doc)].attempts >= 3)  # requeued with backoff, failing again
        stats = controller.stats()
        assert stats.retries >= 2 and stats.terminal == 0 and stats.dropped == 0
        assert stats.last_error.message.startswith("EvaluationFailed: v0001: every probe errored")
        assert not report_path(version).exists() and doc.read_bytes() == document_before

        out_of_memory["on"] = False  # what made the probes error is gone: the next retry succeeds
        await until(lambda: report_path(version).exists())
        await until(lambda: str(doc) not in reconciler.failed)
        controller.queue.shutdown()
    report = load_report(report_path(version))
    assert evaluation_failure(report) is None
    assert {p.verdict for p in report.probes} - {Verdict.ERROR, Verdict.SKIP}
    assert failures() >= 3


async def test_a_model_that_fails_the_loaders_check_is_a_failed_attempt(setup):
    cfg, doc, store, base = setup
    version = commit_noise_adapter(store, adapter_key(read_document(doc)), base, scale=float("nan"))
    reconciler = evaluation_reconciler(cfg)
    with pytest.raises(ModelCheckError, match="non-finite logit"):
        await reconciler.reconcile(str(doc))
    assert not report_path(version).exists()
    assert reconciler.failed_attempts()[str(doc)]["error"].startswith("ModelCheckError: ")


def test_a_stored_report_whose_probes_all_errored_is_evaluated_again(setup):
    cfg, doc, store, base = setup
    version = commit_noise_adapter(store, adapter_key(read_document(doc)), base)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    errored = tuple(
        ProbeResult(name, kind, Verdict.ERROR, None, None, {"error": "NotImplementedError"}, "Cannot copy out of meta")
        for name, kind in (("recall_q1", "probe_recall"), ("delta_kl", "delta_kl"))
    )
    write_report(report_path(version), Report("0.1.0", "b", "a", t, t, 0.0, Score(0.0), errored))  # an older learnerd's
    reconciler = evaluation_reconciler(cfg)
    assert reconciler.resync_keys() == [str(doc)]

    report = reconciler.reconcile_sync(str(doc))
    assert report is not None and evaluation_failure(report) is None
    assert load_report(report_path(version)).started_at != t  # replaced on disk
    assert reconciler.changes["versions_evaluated"] == 1
