"""The evaluation reconciler's bookkeeping on real files, without a model: which documents it lists,
what it does without an adapter, the promotion gate on stored reports (promotion, rejection, a crash between
verdict and promotion), harvesting a stored report, the stuck-probe guard, and which reports are failed
attempts."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from learnerd.daemon.config import Config
from learnerd.eval.gate import decide
from learnerd.eval.history import REPORT_FILE
from learnerd.eval.report import ProbeResult, Report, Score, Verdict, load_report, write_report
from learnerd.reconcilers.evaluation import evaluation_failure, evaluation_reconciler, stuck_probes
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.support.evaluation import DLM_ID, commit_version

DOC = (
    f"---\ndlm_id: {DLM_ID}\nbase_model: learnerd/tiny-llama\n---\n"
    "::instruction::\n### Q !probe\nQ1?\n### A\nA1.\n### Q !probe\nQ2?\n### A\nA2.\n"
)


def recall(name: str, verdict: str, *, harvested: bool, prompt: str = "Q?", reference: str = "A.") -> ProbeResult:
    evidence = {"prompt": prompt, "reference": reference, "harvested": harvested, "confidence": 0.9}
    return ProbeResult(name, "probe_recall", Verdict(verdict), 0.0, 0.0, evidence, "")


def report_of(version: int, *probes: ProbeResult) -> Report:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    return Report("0.1.0", "b", "a", t, t, 0.0, Score(0.5), probes, extra={"learnerd": {"adapter_version": version}})


@pytest.fixture
def setup(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "qa.dlm"
    doc.write_text(DOC)
    cfg = Config(state_dir=tmp_path / "state", docs_dirs=[docs])
    return cfg, doc, evaluation_reconciler(cfg)


def test_resync_lists_documents_with_an_adapter(setup):
    _, doc, reconciler = setup
    (doc.parent / "other.dlm").write_text(DOC.replace(DLM_ID, "01KPPJZWBDDDYRESSA0HESRDHT"))
    (doc.parent / "broken.dlm").write_text("not a document")
    assert reconciler.resync_keys() == []
    commit_version(reconciler.store)
    assert reconciler.resync_keys() == [str(doc)]


def test_resync_lists_a_document_whose_only_version_is_a_candidate(setup):
    _, doc, reconciler = setup
    commit_version(reconciler.store, promote=False)
    assert reconciler.resync_keys() == [str(doc)]


def candidate_with_report(store: AdapterStore, *probes: ProbeResult):
    version = commit_version(store, promote=False)
    write_report(version.path / REPORT_FILE, report_of(version.number, *probes))
    return version


def test_the_gate_promotes_a_good_candidate_and_rejects_a_worse_one(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "qa.dlm"
    doc.write_text(DOC)
    promoted, verdicts = [], []
    reconciler = evaluation_reconciler(
        Config(state_dir=tmp_path / "state", docs_dirs=[docs]),
        on_verdict=lambda path, verdict: verdicts.append(verdict.outcome),
        on_promoted=lambda path, version: promoted.append((path, version.name)),
    )
    store = reconciler.store
    good = (recall("r1", "pass", harvested=False), recall("r2", "pass", harvested=False))
    v1 = candidate_with_report(store, *good)
    reconciler.reconcile_sync(str(doc))
    assert store.current(DLM_ID) == v1 and promoted == [(str(doc), "v0001")] and verdicts == ["promoted"]
    assert v1.verdict().baseline is None and reconciler.recall[str(doc)]["version"] == "v0001"

    worse = (recall("r1", "fail", harvested=False), recall("r2", "fail", harvested=False))
    v2 = candidate_with_report(store, *worse)
    reconciler.reconcile_sync(str(doc))
    assert store.current(DLM_ID) == v1 and len(promoted) == 1 and verdicts == ["promoted", "rejected"]
    rejected, verdict = store.rejected(DLM_ID)
    assert rejected == v2 and verdict.baseline == 1
    assert verdict.reasons == ("probe_recall: 0/2 passed (current 2/2): 2 newly fail, 0 newly pass; net 2 worse > 1",)
    reconciler.reconcile_sync(str(doc))  # level-triggered: decided once
    assert verdicts == ["promoted", "rejected"] and reconciler.changes == {"promoted": 1, "rejected": 1}

    v3 = candidate_with_report(store, *good)  # the next cycle's candidate is compared with v1, not v2
    reconciler.reconcile_sync(str(doc))
    assert store.current(DLM_ID) == v3 and v3.verdict().baseline == 1 and promoted[-1] == (str(doc), "v0003")


def test_a_promotion_a_crash_interrupted_is_made_by_the_next_reconcile(setup):
    _, doc, reconciler = setup
    promoted = []
    reconciler.on_promoted = lambda path, version: promoted.append(version.name)
    v1 = candidate_with_report(reconciler.store, recall("r1", "pass", harvested=False))
    decision = decide(load_report(v1.path / REPORT_FILE), None, reconciler.settings.gate)
    reconciler.store.record_verdict(v1, decision.verdict())  # the verdict was written, then the process died
    assert reconciler.store.current(DLM_ID) is None
    reconciler.reconcile_sync(str(doc))
    assert reconciler.store.current(DLM_ID) == v1 and promoted == ["v0001"]
    assert reconciler.changes == {}  # nothing evaluated or decided again


def test_a_report_with_an_errored_probe_is_never_promoted(setup):
    _, doc, reconciler = setup
    broken = ProbeResult("delta_kl", "delta_kl", Verdict.ERROR, None, None, {}, "non-finite logits")
    v1 = candidate_with_report(reconciler.store, recall("r1", "pass", harvested=False), broken)
    reconciler.reconcile_sync(str(doc))
    assert reconciler.store.current(DLM_ID) is None
    assert v1.verdict().reasons == ("evaluation_complete: 1 probe(s) errored: delta_kl",)


def test_nothing_to_do_without_a_document_or_an_adapter(setup):
    _, doc, reconciler = setup
    assert reconciler.reconcile_sync(str(doc.parent / "gone.dlm")) is None
    assert reconciler.reconcile_sync(str(doc)) is None
    assert reconciler.changes == {}


@pytest.mark.anyio
async def test_a_broken_document_is_checked_again_later(setup):
    cfg, doc, reconciler = setup
    commit_version(reconciler.store)
    doc.write_text("---\nnot: [valid\n---\n")
    result = await reconciler.reconcile(str(doc))
    assert result.requeue_after == cfg.probes.broken_document_retry_s


def test_a_stored_report_is_harvested_without_its_stuck_probes(setup):
    cfg, doc, reconciler = setup
    cfg.evaluation.auto_harvest = True
    reconciler = evaluation_reconciler(cfg)
    version = commit_version(reconciler.store)
    report = report_of(
        1,
        recall("recall_q1", "fail", harvested=False, prompt="Q1?", reference="A1."),
        recall("recall_q2", "fail", harvested=True, prompt="Q2?", reference="A2."),
    )
    write_report(
        version.path / REPORT_FILE, dataclasses.replace(report, extra={**report.extra, "stuck_probes": ["recall_q2"]})
    )
    assert reconciler.reconcile_sync(str(doc)) is not None
    added = read_document(doc).sections[1:]
    assert [(s.harvest_source, [(p.question, p.probe) for p in s.qa_pairs()]) for s in added] == [
        ("auto-harvest/recall_q1", [("Q1?", False)])  # a reinforcement copy; the stuck probe is left alone
    ]
    assert reconciler.stuck == {str(doc): ("recall_q2",)}
    assert reconciler.changes == {"sections_harvested": 1, "documents_written": 1}
    before = doc.read_bytes()
    reconciler.reconcile_sync(str(doc))  # level-triggered: nothing new to write
    assert doc.read_bytes() == before


def test_stuck_counts_failures_with_the_harvested_copy_since_the_last_pass(tmp_path: Path):
    store = AdapterStore(tmp_path)
    history = [
        recall("p", "pass", harvested=False),  # v1: passed — the walk stops here
        recall("p", "fail", harvested=False),  # v2: failed before its copy existed: not counted
        recall("p", "fail", harvested=True),  # v3
        recall("p", "error", harvested=True),  # v4: errors neither count nor end the streak
        recall("p", "fail", harvested=True),  # v5
    ]
    for number, probe in enumerate(history, start=1):
        version = commit_version(store)
        write_report(version.path / REPORT_FILE, report_of(number, probe))
    commit_version(store)  # v6, being evaluated
    current = report_of(6, recall("p", "fail", harvested=True), recall("q", "fail", harvested=True))
    assert stuck_probes(store, DLM_ID, current, 3) == ("p",)  # v6, v5, v3
    assert stuck_probes(store, DLM_ID, current, 4) == ()
    assert stuck_probes(store, DLM_ID, report_of(6, recall("p", "pass", harvested=True)), 1) == ()


@pytest.mark.parametrize(
    ("verdicts", "failed"),
    [
        (("error",), True),  # a preflight error alone
        (("error", "error", "skip"), True),
        (("error", "pass"), False),  # a probe errored beside results: a report
        (("skip",), False),
        ((), False),
    ],
)
def test_a_report_is_a_failed_attempt_when_every_probe_errored(verdicts: tuple[str, ...], failed: bool):
    probes = tuple(ProbeResult(f"p{i}", "delta_kl", Verdict(v), None, None, {}, v) for i, v in enumerate(verdicts))
    assert (evaluation_failure(report_of(1, *probes)) is not None) is failed
