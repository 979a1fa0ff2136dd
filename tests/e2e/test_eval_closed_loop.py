"""The closed loop, measured: train → evaluate → harvest → retrain, on its own, until it settles.

The daemon's training controller (file watch → "training" → training reconciler) is not on main yet, so
the training step is :func:`tests.support.training.train_document` — one cycle as that reconciler runs
it — and the evaluation is the real :class:`EvaluationReconciler` with ``auto_harvest = true``, called as
the training reconciler's ``on_committed`` hook will call it. The document starts under-trained (6 epochs
where 40 memorise it); each harvest writes reinforcement copies of the failing probes into it, which is
the document change that starts the next cycle.
"""

from __future__ import annotations

from itertools import pairwise

import anyio
import pytest

from learnerd.config import Config
from learnerd.daemon.app import Daemon
from learnerd.eval.history import history, report_path
from learnerd.eval.report import load_report
from learnerd.eval.score import recall_counts
from learnerd.reconcilers.evaluation import EvaluationReconciler
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import DLM_ID, qa_document, run_cli, state_with_models
from tests.support.training import train_document

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
MAX_CYCLES = 5


def test_the_loop_raises_the_probe_pass_rate_until_it_settles(tmp_path, models_dir, minilm):
    state = state_with_models(tmp_path, models_dir)
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "qa.dlm"
    doc.write_text(qa_document(QA_PAIRS, epochs=6))
    cfg = Config(state_dir=state, docs_dirs=[docs])
    cfg.evaluation.auto_harvest = True
    evaluation = EvaluationReconciler(cfg)
    cycles: list[tuple[str, str, int, int, int]] = []

    async def run_loop() -> None:
        for _ in range(MAX_CYCLES):
            outcome = await train_document(evaluation.store, doc, models_dir)  # the training reconciler's cycle
            if outcome.version is None:  # the document did not change since the last version: settled
                return
            before = len(read_document(doc).sections)
            await evaluation.reconcile(str(doc))  # its on_committed hook: evaluate, harvest
            passed, judged = recall_counts(load_report(report_path(outcome.version)).probes)
            added = len(read_document(doc).sections) - before
            cycles.append((outcome.version.name, outcome.plan.mode, passed, judged, added))

    anyio.run(run_loop)
    print("\ncycle  version  training     probe pass rate  sections harvested")
    for i, (name, mode, passed, judged, added) in enumerate(cycles, start=1):
        print(f"{i:>5}  {name}    {mode:<11}  {passed:>2}/{judged} ({passed / judged:4.0%})      {added}")

    rates = [passed / judged for _, _, passed, judged, _ in cycles]
    assert 2 <= len(cycles) < MAX_CYCLES, cycles  # it ran more than one cycle, and it settled
    assert all(b > a for a, b in pairwise(rates)), rates
    assert rates[0] <= 0.5 and rates[-1] >= 0.8, rates
    assert cycles[0][4] == cycles[0][3] - cycles[0][2]  # every probe failing after cycle 1 got its copy
    assert cycles[-1][4] == 0  # the last evaluation had nothing new to harvest: the loop is settled
    copies = [s for s in read_document(doc).sections if (s.harvest_source or "").startswith("auto-harvest/")]
    assert copies and all(not p.probe for s in copies for p in s.qa_pairs())  # reinforcement, not new probes
    assert [p.pass_rate for p in history(evaluation.store, DLM_ID)] == rates

    plot = tmp_path / "closed-loop.png"
    proc = run_cli("eval", str(doc), "--history", "--plot", str(plot), "--state-dir", str(state))
    print(proc.stdout)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The daemon's own wiring: its start-up resync finds the document's current version without a report
    # and the "evaluation" controller evaluates it.
    last = evaluation.store.current(DLM_ID)
    report_path(last).unlink()
    daemon = Daemon(cfg, embedder=minilm)
    try:
        summary = anyio.run(daemon.run_once)
    finally:
        daemon.close()
    assert summary.changes["evaluation"]["versions_evaluated"] == 1
    assert recall_counts(load_report(report_path(last)).probes) == (cycles[-1][2], cycles[-1][3])
