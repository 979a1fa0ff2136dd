"""The evaluation reconciler: every document's adapter versions are evaluated, each candidate goes through
the promotion gate, and — when configured — failures flow back into the document. Key: a document path.

``reconcile(doc_path)`` is level-triggered. It reads the document, finds its current (promoted) version and
its candidate (the newest committed version, when newer: :meth:`~learnerd.store.adapters.AdapterStore.candidate`)
in the adapter store (key: the document's ``dlm_id``, :func:`~learnerd.eval.history.adapter_key`) and:

1. makes sure each has a report: a version without one (``versions/vNNNN/eval.json``), or with only a failed
   one (below), is evaluated against the document as it is now (:func:`~learnerd.eval.suite.evaluate_version`,
   in a worker thread, one at a time, on ``[evaluation] num_threads`` torch threads; its items scored as
   ``[serve] routing`` serves them, routed by the version's own threshold under the daemon's embedder); the
   *stuck* probes are
   added to the report's findings and the report is written atomically. It logs ``evaluation.started``, one
   ``evaluation.progress`` per step (``step`` of ``of``) and ``evaluation.finished``. When the reconcile is
   cancelled (the controller's timeout, a drain or the daemon stopping), the worker thread stops at its next
   batch — within about a second on the tiny model — before the reconcile returns, and nothing is written;
2. **the promotion gate** (:func:`learnerd.eval.gate.decide`, ``[evaluation.gate]``): a candidate without a
   verdict is compared with the current version's report; the verdict is written (``verdict.json``,
   :meth:`~learnerd.store.adapters.AdapterStore.record_verdict`), logged (``evaluation.gate``) and passed to
   ``on_verdict``, and only a promoted candidate becomes current
   (:meth:`~learnerd.store.adapters.AdapterStore.promote`, then ``on_promoted(doc_path, version)``: the daemon
   serves it). A rejected candidate keeps its directory, report and verdict and is never served; the next
   training cycle starts from the current version. A verdict written before a crash is read back, so a
   promoted candidate whose promotion the crash interrupted is promoted by the next reconcile. An evaluation
   that errors, is cancelled or times out writes no report, so it reaches no verdict: nothing is promoted;
3. with ``[evaluation] auto_harvest = true``, applies the failing probes of the newest evaluated version's
   report to the document through :func:`~learnerd.eval.harvest.auto_harvest` — the code ``learnerd harvest``
   runs — in ``reinforce`` mode: a failing ``!probe`` of the document gets one plain ``### Q`` copy of
   itself, and copies whose probe a person since edited or deleted are removed. The write changes the
   document, the file watch enqueues it for training, the next candidate is committed and comes back here:
   train → evaluate → gate → harvest → retrain. Harvesting a report twice writes nothing the second time, so
   a crash between the report and the harvest is repaired by the next reconcile.

Loops that never settle are guarded twice. A probe's harvested copy is written once (the same copy is
never added again). And a probe is *stuck* when it has failed in ``max_failing_cycles`` evaluated versions
that were trained with its harvested copy, with no pass since: it is listed in the report's findings and
``extra["stuck_probes"]`` and logged, and never harvested again until it passes — so a person who deletes
the copy of a probe the adapter cannot learn is not overruled forever.

An evaluation that errors is a **failed attempt**, never a report: one whose probes all errored
(:func:`evaluation_failure`: nothing was measured — a model broken by its load, non-finite logits) or
that raised (a model that failed the loader's known-answer check, ...). Nothing is written, so neither the
harvest nor a later reconcile reads it; the attempt is recorded (:attr:`EvaluationReconciler.failed`,
shown by ``learnerd ctl status``; ``on_failure``: the ``learnerd_evaluation_failures_total`` metric) and
the reconcile raises, so the controller retries the key with its rate-limited backoff. A stored report
whose probes all errored (older learnerd wrote those) counts as failed: it is evaluated again.

Nothing to do (``Result()``): the document is gone, or has no adapter yet. A document that does not parse
is checked again after ``[probes] broken_document_retry_s``; an unusable base model is a terminal error.

Feeding: :meth:`EvaluationReconciler.resync_keys` lists every ``.dlm`` document under the docs directories
that has an adapter version (the daemon's start-up resync: a version whose report is missing or failed is
evaluated again, a candidate never decided goes through the gate); the training reconciler's
``on_committed(doc_path, version)`` hook enqueues the document after each committed candidate.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import structlog

from learnerd.eval.gate import decide
from learnerd.eval.harvest import HarvestResult, auto_harvest
from learnerd.eval.history import adapter_documents, adapter_key, report_path, version_reports
from learnerd.eval.probes.base import EvalOptions
from learnerd.eval.probes.recall import KIND as RECALL
from learnerd.eval.probes.recall import exact_match, judged
from learnerd.eval.report import Report, ReportError, Verdict, load_report, write_report
from learnerd.eval.settings import EvaluationSettings
from learnerd.eval.suite import evaluate_version, total_steps
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.base_model import BaseModelError, resolve_base_model
from learnerd.ml.device import DeviceError, resolve_device
from learnerd.ml.embedders import Embedder, shared_embedder
from learnerd.ml.threads import set_torch_threads
from learnerd.reconcilers.spec import (
    ADAPTERS,
    PROMOTIONS,
    AdapterCommit,
    AdapterPromotion,
    ControllerSpec,
    SpecConfig,
    Watch,
    Wiring,
)
from learnerd.runtime.progress import ProgressBoard
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.store.adapters import AdapterStore, AdapterVersion, GateVerdict, version_name
from learnerd.store.dlm import Document, DocumentError, read_document

log = structlog.get_logger(__name__)
CANCEL_POLL_S = 0.05
"""How often a cancelled reconcile checks whether its evaluation thread has stopped (seconds)."""


class EvaluationFailed(Exception):
    """An evaluation measured nothing (:func:`evaluation_failure`): a failed attempt, retried, not a report."""


@dataclass(frozen=True)
class FailedAttempt:
    """A document's failed evaluations since its last report: of ``version`` (e.g. ``v0003``), ``attempts``
    in a row, the last one's ``error`` (``"Type: message"``) at ``at`` (Unix seconds)."""

    version: str
    attempts: int
    error: str
    at: float


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict on ``version`` (a candidate), its ``report`` (None when the verdict was recorded
    before and read back with no readable report), and whether ``current`` moved to it now."""

    version: AdapterVersion
    verdict: GateVerdict
    report: Report | None
    promoted_now: bool


def evaluation_failure(report: Report) -> str | None:
    """Why ``report`` is a failed attempt rather than a report — every probe errored (the preflight
    included; skipped probes aside), so nothing was measured — or None when it is a report (a probe or a
    few may have errored beside results)."""
    errored = [p for p in report.probes if p.verdict == Verdict.ERROR]
    if not errored or any(p.verdict not in (Verdict.ERROR, Verdict.SKIP) for p in report.probes):
        return None
    return f"every probe errored ({len(errored)}), first {errored[0].name}: {errored[0].message}"


class EvaluationReconciler:
    """Evaluates each document's adapter versions, promotes the candidates that pass the gate and, when
    configured, harvests failures.

    Args:
        settings: the ``[evaluation]`` section.
        adapters: the adapter store whose current versions are evaluated.
        models_dir: where built-in and converted base models are cached.
        docs_roots: the directories of ``.dlm`` documents (for the resync).
        broken_document_retry_s: a document that does not parse is checked again after this long (seconds).
        on_report: called with ``(document path, report)`` after each evaluation is written (metrics;
            must not block).
        on_failure: called with the document's path after each failed attempt (metrics; must not block;
            called from the evaluation's worker thread).
        on_verdict: called with ``(document path, verdict)`` after each gate decision (metrics; must not
            block; called from the worker thread).
        on_promoted: called with ``(document path, version)`` after ``current`` moved to ``version`` (must not
            block; called from the worker thread).
        embedder: gives the serving embedder (None: not loaded yet, a failed attempt), with which the items are
            scored as ``[serve] routing = "similarity"`` serves them; None: as the adapter alone answers them
            (``"always-adapter"``).
        rag_k: ``[serve] rag_k``, the retrieved examples the endpoint quotes with a request: the dialogue's
            turns are answered under as many of the document's learned examples (with ``embedder``).
        context_alpha: the context-aware decoding α the endpoint applies to a request answered under retrieved
            examples (``ServeConfig.served_context_alpha``): the dialogue's quoted turns the base answers are decoded
            so.
        choice_margin: the margin at which the endpoint's answers under retrieved examples carry a quoted command
            (``ServeConfig.served_choice_margin``; None: off): the dialogue's quoted turns are answered so.
    """

    name = "evaluation"

    def __init__(
        self,
        settings: EvaluationSettings,
        *,
        adapters: AdapterStore,
        models_dir: Path,
        docs_roots: Sequence[Path],
        broken_document_retry_s: float = 60.0,
        on_report: Callable[[Path, Report], None] | None = None,
        on_failure: Callable[[Path], None] | None = None,
        on_verdict: Callable[[Path, GateVerdict], None] | None = None,
        on_promoted: Callable[[str, AdapterVersion], None] | None = None,
        embedder: Callable[[], Embedder | None] | None = None,
        rag_k: int = 0,
        context_alpha: float = 0.0,
        choice_margin: float | None = None,
    ) -> None:
        self.settings = settings
        self._embedder, self._rag_k, self._context_alpha = embedder, rag_k, context_alpha
        self._choice_margin = choice_margin
        self.options = EvalOptions.from_settings(settings)
        self.store = adapters
        self._models_dir = models_dir
        self._docs_dirs = list(docs_roots)
        self._retry_s = broken_document_retry_s
        self._on_report = on_report
        self._on_failure = on_failure
        self._on_verdict = on_verdict
        self.on_promoted = on_promoted
        self._limiter = anyio.CapacityLimiter(1)
        self.changes: Counter[str] = Counter()  # versions evaluated, promoted, rejected, sections harvested, ...
        self.stuck: dict[str, tuple[str, ...]] = {}  # document key -> stuck probe names, as of its last reconcile
        self.recall: dict[str, dict[str, int | str]] = {}  # document key -> its newest report's RunSummary.recall
        self.failed: dict[str, FailedAttempt] = {}  # document key -> its failed attempts since its last report
        #: The steps of every evaluation in flight (:meth:`progress`), updated from the evaluation's thread.
        self.board = ProgressBoard()

    def failed_attempts(self) -> dict[str, dict[str, Any]]:
        """:attr:`failed` as JSON-able dicts, by document path (for ``learnerd ctl status``)."""
        return {key: dataclasses.asdict(attempt) for key, attempt in list(self.failed.items())}

    def progress(self) -> dict[str, dict[str, Any]]:
        """Every evaluation in flight: its document path → ``step`` of ``total``
        (:func:`~learnerd.eval.suite.total_steps`), ``elapsed_s``, ``s_per_step``, ``eta_s`` (seconds), the
        ``version`` evaluated, the step done last (``after``), ``phase`` ``"evaluating"`` and ``unit`` ``"step"``
        (:class:`~learnerd.runtime.reconcile.ProgressReporter`)."""
        return self.board.snapshot()

    def resync_keys(self) -> list[str]:
        """Every ``.dlm`` document under the docs directories that has an adapter version."""
        return [str(path) for path in adapter_documents(self.store, self._docs_dirs)]

    async def reconcile(self, key: str) -> Result:
        cancel, finished = threading.Event(), threading.Event()
        # Whoever takes this token first decides: the thread (the evaluation runs, ``finished`` comes) or a
        # cancellation that arrived before the thread began (waiting for a thread limiter, queued to a worker:
        # then the work never runs and there is nothing to wait for).
        begun = threading.Lock()

        def work() -> None:
            if not begun.acquire(blocking=False):
                return  # cancelled before it began
            try:
                self.reconcile_sync(key, cancel=cancel)
            finally:
                finished.set()

        try:
            async with self._limiter:
                try:
                    await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
                except anyio.get_cancelled_exc_class():
                    cancel.set()  # the thread stops at its next batch; wait for it, so nothing outlives us
                    if not begun.acquire(blocking=False):
                        with anyio.CancelScope(shield=True):
                            while not finished.is_set():
                                await anyio.sleep(CANCEL_POLL_S)
                    log.info("evaluation.cancelled", path=key)
                    raise
        except DocumentError as exc:
            log.warning("evaluation.document_invalid", path=key, error=str(exc), retry_s=self._retry_s)
            return Result(requeue_after=self._retry_s)
        except (BaseModelError, DeviceError) as exc:
            raise TerminalError(f"{key}: {exc}") from exc
        return Result()

    def reconcile_sync(self, key: str, *, cancel: threading.Event | None = None) -> Report | None:
        """The blocking reconcile (see the module docstring); the report of the newest version evaluated (the
        candidate's, when there is one, else the current version's), or None when there is nothing to evaluate.
        Setting ``cancel`` stops a running evaluation at its next batch, before anything is written.

        Raises:
            DocumentError: the document does not parse.
            BaseModelError: its base model cannot be resolved or loaded.
            DeviceError: ``[evaluation] device`` names a GPU this machine does not have.
            AdapterStoreError, OSError: the store or the file system failed.
            EvaluationCancelled: ``cancel`` was set during the evaluation.
            EvaluationFailed: every probe errored; recorded in :attr:`failed`, nothing written.
            ModelCheckError, RuntimeError: the evaluation could not run (recorded in :attr:`failed` too).
        """
        path = Path(key)
        if not path.exists():
            return None
        document = read_document(path)
        doc_key = adapter_key(document)
        current = self.store.current(doc_key)
        report = self._report(path, document, current, cancel) if current is not None else None
        gated = self._gate(path, document, current, report, cancel)
        if gated is not None and gated.report is not None:
            report = gated.report
        if report is None:
            return None
        self.failed.pop(key, None)
        before, after, probes = exact_recall(report)
        version = (report.extra.get("learnerd") or {}).get("adapter_version")
        name = version_name(version) if isinstance(version, int) else ""
        passed = passed_recall(report)
        self.recall[key] = {"version": name, "before": before, "after": after, "probes": probes, "passed": passed}
        if self.settings.auto_harvest:
            self._harvest(path, report)
        return report

    def gate(self, key: str, *, cancel: threading.Event | None = None) -> GateResult | None:
        """Evaluate the document ``key``'s candidate (and its current version, if it has no report yet) and
        decide on it — what :meth:`reconcile_sync` does, without the harvest (``learnerd train``). None when the
        document has no candidate.

        Raises:
            as :meth:`reconcile_sync`.
        """
        path = Path(key)
        document = read_document(path)
        doc_key = adapter_key(document)
        current = self.store.current(doc_key)
        if self.store.candidate(doc_key) is None:
            return None
        report = self._report(path, document, current, cancel) if current is not None else None
        return self._gate(path, document, current, report, cancel)

    def _gate(
        self,
        path: Path,
        document: Document,
        current: AdapterVersion | None,
        current_report: Report | None,
        cancel: threading.Event | None,
    ) -> GateResult | None:
        """Decide on the document's candidate, if any (the module docstring, step 2)."""
        candidate = self.store.candidate(adapter_key(document))
        if candidate is None:
            return None
        verdict = candidate.verdict()
        report: Report | None
        if verdict is None:
            report = self._report(path, document, candidate, cancel)
            decision = decide(
                report,
                current_report,
                self.settings.gate,
                current_version=current.number if current is not None else None,
            )
            verdict = decision.verdict()
            self.store.record_verdict(candidate, verdict)
            self.changes["promoted" if verdict.promoted else "rejected"] += 1
            log.info(
                "evaluation.gate",
                path=str(path),
                version=candidate.name,
                outcome=verdict.outcome,
                baseline=version_name(verdict.baseline) if verdict.baseline is not None else None,
                reasons=list(verdict.reasons),
            )
            if self._on_verdict is not None:
                self._on_verdict(path, verdict)
        else:
            report = self._stored_report(candidate)
        moved = verdict.promoted and self.store.promote(candidate)
        if moved:
            log.info("evaluation.promoted", path=str(path), version=candidate.name)
            if self.on_promoted is not None:
                self.on_promoted(str(path), candidate)
        return GateResult(candidate, verdict, report, moved)

    @staticmethod
    def _stored_report(version: AdapterVersion) -> Report | None:
        try:
            return load_report(report_path(version))
        except (OSError, ReportError):
            return None

    def _report(
        self, path: Path, document: Document, version: AdapterVersion, cancel: threading.Event | None
    ) -> Report:
        target = report_path(version)
        if target.exists():
            try:
                stored = load_report(target)
            except ReportError as exc:
                log.warning("evaluation.report_unreadable", path=str(target), error=str(exc))
            else:
                failure = evaluation_failure(stored)
                if failure is None:
                    return stored
                log.warning("evaluation.stored_report_failed", path=str(target), reason=failure)
        base = resolve_base_model(document.frontmatter.base_model, cache_dir=self._models_dir, relative_to=path.parent)
        placement = resolve_device(self.settings.device)
        threads = set_torch_threads(self.settings.num_threads)
        total = total_steps(self.options)
        log.info("evaluation.started", path=str(path), version=version.name, steps=total, threads=threads)
        done = 0
        self.board.begin(str(path), total, version=version.name, phase="evaluating", unit="step")

        def progress(step: str) -> None:
            nonlocal done
            done += 1
            self.board.update(str(path), done, after=step)
            log.info("evaluation.progress", path=str(path), version=version.name, step=done, of=total, done=step)

        try:
            embedder = self._embedder() if self._embedder is not None else None
            if self._embedder is not None and embedder is None:
                raise EvaluationFailed(f"{version.name}: the embedder that routes its requests is not loaded yet")
            report = evaluate_version(
                document,
                version,
                base,
                options=self.options,
                progress=progress,
                cancel=cancel,
                placement=placement,
                answer_cache_dir=self._models_dir,
                embedder=embedder,
                rag_k=self._rag_k,
                context_alpha=self._context_alpha,
                choice_margin=self._choice_margin,
            )
            failure = evaluation_failure(report)
            if failure is not None:
                raise EvaluationFailed(f"{version.name}: {failure}")
        except (BaseModelError, DocumentError):
            raise
        except Exception as exc:
            self._failed_attempt(path, version, exc)
            raise
        finally:
            self.board.end(str(path))
        stuck = stuck_probes(self.store, version.doc_key, report, self.settings.max_failing_cycles)
        if stuck:
            note = (
                f"{len(stuck)} probe(s) still fail after {self.settings.max_failing_cycles} cycles with their "
                "harvested copy; not harvested again"
            )
            report = dataclasses.replace(
                report,
                score=dataclasses.replace(report.score, findings=(note, *report.score.findings)),
                extra={**report.extra, "stuck_probes": list(stuck)},
            )
        write_report(target, report)
        self.changes["versions_evaluated"] += 1
        if self._on_report is not None:
            self._on_report(path, report)
        failed = sum(p.verdict == Verdict.FAIL for p in report.probes)
        log.info(
            "evaluation.finished",
            path=str(path),
            version=version.name,
            score=round(report.score.overall, 4),
            band=report.score.band,
            failed=failed,
            stuck=len(stuck),
            wall_s=round(report.wall_seconds, 2),
        )
        return report

    def _failed_attempt(self, path: Path, version: AdapterVersion, exc: Exception) -> None:
        previous = self.failed.get(str(path))
        attempts = previous.attempts + 1 if previous is not None and previous.version == version.name else 1
        error = f"{type(exc).__name__}: {exc}"
        self.failed[str(path)] = FailedAttempt(version.name, attempts, error, time.time())
        log.warning("evaluation.failed", path=str(path), version=version.name, attempt=attempts, error=error)
        if self._on_failure is not None:
            self._on_failure(path)

    def _harvest(self, path: Path, report: Report) -> HarvestResult:
        stuck = set(report.extra.get("stuck_probes") or ())
        self.stuck[str(path)] = tuple(sorted(stuck))
        harvestable = dataclasses.replace(report, probes=tuple(p for p in report.probes if p.name not in stuck))
        result = auto_harvest(
            path,
            harvestable,
            tag=self.settings.harvest_tag,
            min_confidence=self.settings.min_confidence,
            reinforce=True,
        )
        if result.written:
            counts = {"sections_harvested": len(result.plan.additions), "copies_removed": len(result.removed)}
            self.changes.update({k: v for k, v in counts.items() if v}, documents_written=1)
        log.info(
            "evaluation.harvested",
            path=str(path),
            added=len(result.plan.additions),
            orphaned_copies_removed=len(result.removed),
            reinforcements=sum(a.reinforcement for a in result.plan.additions),
            skipped=len(result.plan.skipped),
            stuck=len(stuck),
            written=result.written,
        )
        return result


def exact_recall(report: Report) -> tuple[int, int, int]:
    """``(base, adapter, probes)``: how many of ``report``'s recall probes the base and the adapter answer
    exactly (whitespace collapsed), out of how many were answered."""
    answered = [p.evidence for p in judged(report)]
    base = sum(exact_match(str(e.get("base_generated", "")), str(e["reference"])) for e in answered)
    return base, sum(bool(e.get("exact_match")) for e in answered), len(answered)


def passed_recall(report: Report) -> int:
    """How many of ``report``'s answered recall probes pass (an exact answer, or one similar enough: the
    probe's verdict, which the gate's ``probe_recall`` counts) — at least :func:`exact_recall`'s adapter count."""
    return sum(p.verdict == Verdict.PASS for p in judged(report))


def stuck_probes(store: AdapterStore, doc_key: str, report: Report, max_failing_cycles: int) -> tuple[str, ...]:
    """Names of ``report``'s failing recall probes that failed in at least ``max_failing_cycles``
    evaluated versions trained with their harvested copy (``evidence.harvested``) since they last passed:
    ``report`` counts first, then the stored reports of older versions, newest first. The walk for a
    probe stops at a report where it passed or which does not have it."""
    counts = {
        p.name: int(bool(p.evidence.get("harvested")))
        for p in report.probes
        if p.kind == RECALL and p.verdict == Verdict.FAIL
    }
    open_ = set(counts)
    current = (report.extra.get("learnerd") or {}).get("adapter_version")
    for version, older in version_reports(store, doc_key, newest_first=True):
        if not open_:
            break
        if isinstance(current, int) and version.number >= current:
            continue
        by_name = {p.name: p for p in older.probes}
        for name in list(open_):
            p = by_name.get(name)
            if p is None or p.verdict == Verdict.PASS:
                open_.discard(name)
            elif p.verdict == Verdict.FAIL and p.evidence.get("harvested"):
                counts[name] += 1
    return tuple(sorted(n for n, c in counts.items() if c >= max_failing_cycles))


def evaluation_reconciler(
    cfg: SpecConfig,
    on_report: Callable[[Path, Report], None] | None = None,
    on_failure: Callable[[Path], None] | None = None,
    on_verdict: Callable[[Path, GateVerdict], None] | None = None,
    on_promoted: Callable[[str, AdapterVersion], None] | None = None,
    embedder: Callable[[], Embedder | None] | None = None,
) -> EvaluationReconciler:
    """The evaluation reconciler of ``cfg`` (the daemon's :class:`~learnerd.daemon.config.Config`;
    ``on_report``, ``on_failure``, ``on_verdict``: its metrics hooks; ``on_promoted``: its promotion hook),
    judging what ``[serve] routing`` serves: routed with ``embedder``'s embedder (None: this process's one of
    ``[embeddings]``, :func:`learnerd.ml.embedders.shared_embedder`) and quoted ``[serve] rag_k`` examples, or the
    adapter alone."""
    if cfg.serve.routing == "always-adapter":
        embedder = None
    elif embedder is None:
        embedder = functools.partial(shared_embedder, cfg.embeddings)
    return EvaluationReconciler(
        cfg.evaluation,
        adapters=adapter_store(cfg),
        models_dir=cfg.layout.models_dir,
        docs_roots=cfg.layout.docs_roots,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
        on_report=on_report,
        on_failure=on_failure,
        on_verdict=on_verdict,
        on_promoted=on_promoted,
        embedder=embedder,
        rag_k=cfg.serve.rag_k,
        context_alpha=cfg.serve.served_context_alpha,
        choice_margin=cfg.serve.served_choice_margin,
    )


def _committed_document(wiring: Wiring, commit: AdapterCommit) -> list[str]:
    return [str(commit.doc_path)]


def _build(wiring: Wiring) -> EvaluationReconciler:
    def promoted(doc_path: str, version: AdapterVersion) -> None:  # called in the evaluation's worker thread
        anyio.from_thread.run_sync(wiring.notify, PROMOTIONS, AdapterPromotion(doc_path, version))

    return evaluation_reconciler(
        wiring.cfg,
        on_report=wiring.metrics.evaluated,
        on_failure=wiring.metrics.evaluation_failed,
        on_verdict=wiring.metrics.gate_verdict,
        on_promoted=promoted,
        embedder=lambda: wiring.embedder,
    )


#: Committed candidates → reports → the promotion gate: the document of every commit is evaluated, and its
#: promotions are :data:`~learnerd.reconcilers.spec.PROMOTIONS` events. Cancelled at shutdown, not drained: a
#: cancelled evaluation writes no report and reaches no verdict, so the next start evaluates again.
SPEC = ControllerSpec(
    EvaluationReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 3600.0},
    watches=(Watch(ADAPTERS, _committed_document),),
    shutdown="cancel",
    model_work=True,
)
