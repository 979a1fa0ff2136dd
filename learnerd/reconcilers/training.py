"""The training reconciler: a .dlm document's LoRA adapter follows the document's training rows.

Key: a document path (``str(path)``). The daemon adds it to the "training" workqueue when the file watch
sees the document change (after a debounce), when a probe is pushed over RPC for it, and for every
watched document at start-up.

``reconcile(doc_path)`` is level-triggered: it reads the document now and compares its rows with what
the document's current adapter was trained on. One cycle:

1. **Drain injected probes** (the cycle boundary): probes pushed over RPC for this document and pending
   in the probe journal become ``### Q !probe`` sections (marker source ``rpc-inject/<tag or slug>``),
   appended with the compare-and-swap :func:`~learnerd.store.dlm.update_document` (the document is
   created when missing); the journal marks them consumed only after the write. A crash in between leaves
   them pending; the next cycle skips every probe whose section (same content, so same section id) is
   already in the document, then consumes it — nothing is lost, nothing is written twice.
2. **Read** the document: one that does not parse — a person mid-edit, most likely — is logged and
   checked again after ``[training] broken_document_retry_s`` (a save triggers a cycle anyway); a
   missing one (removed) is left alone: its adapters are kept, it is not trained again until it reappears.
3. **Check** its base model and ``training`` block: an unknown base or a block learnerd cannot train
   raises :class:`~learnerd.runtime.reconcile.TerminalError` with a one-line message (retried only after the
   document changes again).
4. **Plan and train** with :func:`learnerd.training.cycle.train_cycle`: nothing when the rows' section ids are
   the current adapter's (so an identical save trains nothing), else a fresh or incremental cycle in a
   child process (niced, ``num_threads`` torch threads; cancelled and cleaned up when the daemon stops),
   committed as the document's next adapter version — a candidate: the evaluation reconciler's promotion
   gate decides whether it becomes current (served). A cycle starts from the current version, never from
   a rejected candidate, and trains nothing when the rows are those of the newest candidate.
5. **Report**: one structlog event ``training.cycle`` per cycle with its outcome, and — after a commit —
   ``on_committed(doc_path, version)`` (the :data:`~learnerd.reconcilers.spec.ADAPTERS` event the evaluation
   controller watches).

Adapters are keyed in the store by the document's ``dlm_id`` (its frontmatter ULID), so renaming or
moving a document keeps its adapters; two documents claiming the same ``dlm_id`` are refused.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psutil
import structlog

from learnerd.fleet.ledger import adapter_store
from learnerd.ml.base_model import BaseModelError, resolve_base_model
from learnerd.ml.device import DeviceError, resolve_device
from learnerd.ml.embedders import Embedder, shared_embedder
from learnerd.ml.rows import TrainingRow, document_rows
from learnerd.reconcilers.probes import document_router
from learnerd.reconcilers.spec import ADAPTERS, AdapterCommit, ControllerSpec, SpecConfig, Wiring
from learnerd.runtime.progress import ProgressBoard
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.store.adapters import AdapterStore, AdapterVersion
from learnerd.store.dlm import (
    Document,
    DocumentError,
    TrainingConfigError,
    UnrepresentableError,
    new_document,
    probe_section,
    probe_section_ids,
    read_document,
    update_document,
)
from learnerd.store.manifest import document_origins
from learnerd.store.probe_journal import ProbeJournal
from learnerd.store.routing import DocumentScope
from learnerd.training.config import check_trainable
from learnerd.training.cycle import CycleOutcome, ReplayPolicy, train_cycle
from learnerd.training.lora import PhaseEvent, ProgressEvent
from learnerd.training.recipes import default_training, document_training
from learnerd.training.runner import ProcessUsage, TrainingFailed, WarmSpare
from learnerd.training.settings import TrainingSettings

log = structlog.get_logger(__name__)

TRAINING_STEP = "training step"
"""The phase of a cycle's optimizer steps (:meth:`TrainingReconciler.progress`)."""
RECENT_CYCLES = 20
"""Wall durations of this many latest trained cycles are kept (:attr:`TrainingReconciler.recent_cycles_s`)."""

_NEW_DOCUMENT_PROSE = (
    "# Probes injected over RPC\n\n"
    "learnerd appends one `### Q !probe` section here per probe pushed with `inject_probe`."
)


class CycleCancelled(Exception):
    """The cycle was cancelled by :meth:`TrainingReconciler.stop` (the daemon is stopping)."""


class DuplicateDocumentError(Exception):
    """Two documents carry the same ``dlm_id`` (one was copied): their adapters would collide."""


@dataclass(frozen=True)
class CycleReport:
    """One cycle of one document: ``outcome`` (plan, committed version, training result), the probes
    written into the document from the journal, and the cycle's wall time in seconds."""

    path: Path
    doc_key: str
    outcome: CycleOutcome
    probes_written: int
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        """The cycle as plain data (the ``training.cycle`` log event, ``learnerd train --json``); losses in
        nats per token, ``outcome`` "committed" or "nothing to train"; ``new_pairs`` / ``replayed_pairs``: the
        Q/A pairs (chat rows) trained as new and replayed, ``*_sections`` the sections they are in."""
        plan, version, result = self.outcome.plan, self.outcome.version, self.outcome.result
        new_ids = set(plan.new_section_ids)
        chat = [r for r in plan.rows if r.messages is not None]
        fields: dict[str, Any] = {
            "path": str(self.path),
            "doc_key": self.doc_key,
            "mode": plan.mode,
            "reason": plan.reason,
            "new_pairs": sum(1 for r in chat if r.section_id in new_ids),
            "replayed_pairs": sum(1 for r in chat if r.section_id not in new_ids),
            "new_sections": len(plan.new_section_ids),
            "replayed_sections": len(plan.replay_section_ids),
            "removed_sections": len(plan.removed_section_ids),
            "probes_written": self.probes_written,
            "duration_s": round(self.duration_s, 3),
            "outcome": "nothing to train",
        }
        if version is not None and result is not None:
            fields.update(
                outcome="committed",
                version=version.name,
                adapter_path=str(version.path),
                steps=result.steps,
                rows=result.rows,
                start_loss=result.start_loss,
                final_loss=result.final_loss,
                tokens=result.tokens_trained,
                peak_rss_mb=result.peak_rss_mb,
            )
        if self.outcome.undertrained is not None:
            fields["undertrained"] = self.outcome.undertrained
        return fields


class TrainingReconciler:
    """Trains .dlm documents (key: a path) into versioned adapters. See the module docstring.

    Args:
        store: the adapter store.
        settings: the ``[training]`` section (replay, threads, niceness, retry delay).
        models_dir: where built-in base models are built and cached.
        journal: the probe journal drained at each cycle boundary (None: no RPC injection).
        new_document_base_model: ``base_model`` of a document created to receive injected probes.
        on_committed: called with ``(doc_path, version)`` after each commit (must not block; the public
            attribute of the same name may be replaced).
        on_cycle: called with the :class:`CycleReport` of every cycle, trained or not (metrics; must not block).
        clock: monotonic seconds, for durations.
        db_path: the store (SQLite path or PostgreSQL URL) a version's manifest looks its learned examples up in
            (:func:`learnerd.store.manifest.document_origins`; None: recorded by their marker alone).
        served_rag_k: ``[serve] rag_k``; above 0, a document trains under that many retrieved examples unless its
            ``training`` block says otherwise (:func:`learnerd.training.recipes.recipe_for`).
        embedder: gives the serving embedder when a cycle commits (None: not loaded yet), which calibrates the
            version's routing threshold (:func:`learnerd.ml.router.routing_entry`).

    ``spare`` (a running :class:`~learnerd.training.runner.WarmSpare`, or None) may be set while the
    daemon runs, so cycles skip the training process's start-up.
    """

    name = "training"

    def __init__(
        self,
        store: AdapterStore,
        settings: TrainingSettings,
        *,
        models_dir: Path,
        journal: ProbeJournal | None = None,
        new_document_base_model: str,
        on_committed: Callable[[str, AdapterVersion], None] | None = None,
        on_cycle: Callable[[CycleReport], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        db_path: str | Path | None = None,
        served_rag_k: int = 0,
        embedder: Callable[[], Embedder | None] = lambda: None,
    ) -> None:
        self.store = store
        self._embedder = embedder
        self._served_rag_k = served_rag_k
        self._db_path = db_path
        self.settings = settings
        self.models_dir = models_dir
        self.journal = journal
        self.spare: WarmSpare | None = None
        self._base_model = new_document_base_model
        self.on_committed = on_committed
        self.on_cycle = on_cycle
        self._clock = clock
        self._replay = ReplayPolicy(settings.replay_ratio, settings.replay_min_rows)
        self._owners: dict[str, str] = {}  # dlm_id -> path of the document trained under it
        self.in_flight: dict[str, float] = {}  # key -> clock() at the start of its cycle
        #: The phases and optimizer steps of every cycle in flight (:meth:`progress`), from the start of its training
        #: process; what its process uses, by key.
        self.board = ProgressBoard(clock)
        self._usage: dict[str, ProcessUsage] = {}
        self.recent_cycles_s: deque[float] = deque(maxlen=RECENT_CYCLES)
        self.undertrained: dict[str, str] = {}  # key -> the undertrained line of its last committed cycle
        self.changes: Counter[str] = Counter()  # adapters committed, probes written
        self._scopes: set[anyio.CancelScope] = set()
        self._stopping = False

    def resync_keys(self) -> list[str]:
        """The documents with probes pending in the journal (the file watch lists the watched documents)."""
        return self.journal.documents() if self.journal is not None else []

    def progress(self) -> dict[str, dict[str, Any]]:
        """Every cycle whose training process runs: its document path → its ``phase`` (``loading base``, ``base
        answers``, ``start loss``, ``training step``, ``final loss``) and that phase's ``step`` of ``total``
        ``unit``\\ s, ``elapsed_s``, ``s_per_step``, ``eta_s`` (seconds), the document's ``doc_key`` (its ``dlm_id``),
        the last step's ``loss`` (nats per token), and the process's ``cpu_share`` (cores busy since the previous
        read), ``rss_mb`` and ``peak_rss_mb`` (:class:`~learnerd.training.runner.ProcessUsage`)
        (:class:`~learnerd.runtime.reconcile.ProgressReporter`)."""
        snapshot = self.board.snapshot()
        for key, entry in snapshot.items():
            usage = self._usage.get(key)
            if usage is not None:
                entry.update(usage.read())
        return snapshot

    def stop(self) -> None:
        """Cancel every cycle in flight and start no new one (shutdown). A cancelled cycle's training
        process is killed and its staging directory removed; ``current`` is unchanged, and the next
        start retrains the document (its rows differ from the current adapter's)."""
        self._stopping = True
        for scope in self._scopes:
            scope.cancel()

    async def reconcile(self, key: str) -> Result:
        """One cycle for the document ``key``; errors mapped as the module docstring says."""
        path = Path(key)
        try:
            await self.run_cycle(path)
        except FileNotFoundError:
            if path.exists():
                raise
            log.info("training.document_gone", path=key, note="its adapters are kept; not trained until it reappears")
        except DocumentError as exc:
            retry = self.settings.broken_document_retry_s
            log.warning("training.document_invalid", path=key, error=str(exc), retry_s=retry)
            return Result(requeue_after=retry)
        except (BaseModelError, DeviceError, TrainingConfigError, DuplicateDocumentError) as exc:
            raise TerminalError(f"{key}: {exc}") from exc
        except TrainingFailed as exc:
            if exc.permanent:
                raise TerminalError(f"{key}: training failed: {exc}") from exc
            raise
        except CycleCancelled:
            log.info("training.cycle_cancelled", path=key, note="the daemon is stopping; the next start retrains")
        return Result()

    async def run_cycle(
        self,
        path: Path,
        *,
        fresh: bool = False,
        on_progress: Callable[[ProgressEvent], None] | None = None,
        on_start: Callable[[], None] | None = None,
        on_phase: Callable[[PhaseEvent], None] | None = None,
    ) -> CycleReport:
        """Drain injected probes into ``path``, then plan, train and commit one cycle (``learnerd train``).

        Args:
            path: the document.
            fresh: train a new adapter on every row even if an incremental cycle (or none) would do.
            on_progress: called after every optimizer step of this run (not for the steps a checkpoint restored).
            on_start: called when the training process starts (not at all when there is nothing to train).
            on_phase: called with each :class:`~learnerd.training.lora.PhaseEvent` of the training process (the base's
                answers, the start and final losses).

        Raises:
            FileNotFoundError: the document does not exist (and no probes wait for it).
            DocumentError: the document does not parse, or breaks the Q/A grammar (file and line).
            BaseModelError: its ``base_model`` is unknown or unusable.
            DeviceError: ``[training] device`` names a GPU this machine does not have.
            TrainingConfigError: its ``training`` block asks for what learnerd cannot train.
            DuplicateDocumentError: another document has the same ``dlm_id``.
            TrainingFailed: the training process failed; nothing was committed.
            CycleCancelled: :meth:`stop` was called; nothing was committed.
            ConflictError, OSError: writing the probes failed (the journal still holds them).
        """
        if self._stopping:
            raise CycleCancelled("the training reconciler is stopping")
        key = str(path)
        started = self._clock()
        self.in_flight[key] = started
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                report = await self._cycle(path, fresh, on_progress, on_start, started, on_phase)
        finally:
            self._scopes.discard(scope)
            self.board.end(key)
            self._usage.pop(key, None)
            del self.in_flight[key]
        if scope.cancelled_caught:
            raise CycleCancelled(f"{key}: cycle cancelled; the daemon is stopping")
        self._log(report)
        if report.outcome.version is not None:
            self.recent_cycles_s.append(report.duration_s)
            self.changes["adapters_committed"] += 1
            if report.outcome.undertrained is None:
                self.undertrained.pop(key, None)
            else:
                self.undertrained[key] = report.outcome.undertrained
            if self.on_committed is not None:
                self.on_committed(key, report.outcome.version)
        return report

    async def _cycle(
        self,
        path: Path,
        fresh: bool,
        on_progress: Callable[[ProgressEvent], None] | None,
        on_start: Callable[[], None] | None,
        started: float,
        on_phase: Callable[[PhaseEvent], None] | None = None,
    ) -> CycleReport:
        await anyio.to_thread.run_sync(resolve_device, self.settings.device)  # refuse a missing GPU before anything
        probes_written = await anyio.to_thread.run_sync(self._write_probes, path)
        document, rows = await anyio.to_thread.run_sync(_read_rows, path)
        fm = document.frontmatter
        base = await anyio.to_thread.run_sync(
            lambda: resolve_base_model(fm.base_model, cache_dir=self.models_dir, relative_to=path.parent)
        )
        training = document_training(fm.raw.get("training"), builtin=base.builtin, served_rag_k=self._served_rag_k)
        config = check_trainable(training.config)
        self._claim(document, path)
        key = str(path)
        markers = {s.section_id: s.harvest_source for s in document.sections if s.harvest_source is not None}
        origins = await anyio.to_thread.run_sync(document_origins, self._db_path, markers)

        def training_started(pid: int) -> None:
            self.board.begin(key, doc_key=fm.dlm_id)
            with contextlib.suppress(psutil.Error):  # gone already: its exit status will say why
                self._usage[key] = ProcessUsage(pid)
            if on_start is not None:
                on_start()

        def phase(event: PhaseEvent) -> None:
            self.board.update(key, event.done, event.total, phase=event.phase, unit=event.unit)
            if on_phase is not None:
                on_phase(event)

        def stepped(event: ProgressEvent) -> None:
            if event.restored:  # a checkpoint's steps, reported again at once: not this run's, and no pace
                return
            self.board.update(
                key, event.step, event.total_steps, phase=TRAINING_STEP, unit="step", loss=round(event.loss, 4)
            )
            if on_progress is not None:
                on_progress(event)

        outcome = await train_cycle(
            self.store,
            fm.dlm_id,
            base,
            rows,
            config,
            replay=self._replay,
            fresh=fresh,
            own_keys=training.own_keys,
            num_threads=self.settings.num_threads or None,
            niceness=self.settings.niceness,
            device=self.settings.device,
            on_progress=stepped,
            on_start=training_started,
            on_phase=phase,
            spare=self.spare,
            replay_cache_dir=self.models_dir,
            origins=origins,
            checkpoint_every_s=self.settings.checkpoint_every_s,
            routing_embedder=self._embedder(),
        )
        return CycleReport(path, fm.dlm_id, outcome, probes_written, self._clock() - started)

    def _write_probes(self, path: Path) -> int:
        """Append the journal's pending probes for ``path`` as ``!probe`` sections, then consume them.
        Returns how many sections were added (probes already present are consumed, not added)."""
        if self.journal is None:
            return 0
        probes = self.journal.pending(str(path))
        if not probes:
            return 0
        sections = []
        for probe in probes:
            try:
                sections.append(probe_section(probe.prompt, probe.reference, source=probe.harvest_source))
            except UnrepresentableError as exc:  # the RPC server refuses these; only a hand-edited journal has them
                log.error("training.probe_refused", probe_id=probe.id, path=str(path), reason=str(exc))
        added: list[int] = []

        def edit(document: Document) -> Document:
            have = {s.section_id for s in document.sections}
            count = 0
            for section in sections:
                if not probe_section_ids(section) & have:
                    document = document.append_section(section)
                    have.add(section.section_id)
                    count += 1
            added.append(count)
            return document

        def create() -> Document:
            return new_document(
                self._base_model, prose=_NEW_DOCUMENT_PROSE, training=default_training(self._base_model), path=path
            )

        path.parent.mkdir(parents=True, exist_ok=True)
        update_document(path, edit, create=create)
        self.journal.consume(p.id for p in probes)
        self.changes["probes_written"] += added[-1]
        log.info("training.probes_drained", path=str(path), probes=len(probes), sections_added=added[-1])
        return added[-1]

    def _claim(self, document: Document, path: Path) -> None:
        dlm_id, key = document.frontmatter.dlm_id, str(path)
        owner = self._owners.get(dlm_id)
        if owner is not None and owner != key:
            try:
                still = read_document(owner).frontmatter.dlm_id == dlm_id
            except (OSError, DocumentError):
                still = False
            if still:
                raise DuplicateDocumentError(
                    f"dlm_id {dlm_id} is also the id of {owner}; give one of them a fresh dlm_id "
                    "(a copied document must not share its adapters)"
                )
        self._owners[dlm_id] = key

    def _log(self, report: CycleReport) -> None:
        log.info("training.cycle", **report.to_dict())
        if self.on_cycle is not None:
            self.on_cycle(report)


def _read_rows(path: Path) -> tuple[Document, list[TrainingRow]]:
    """The document and its training rows (blocking: parsing a large document takes a while)."""
    document = read_document(path)
    return document, document_rows(document)


def training_reconciler(
    cfg: SpecConfig,
    on_committed: Callable[[str | os.PathLike[str], AdapterVersion], None] | None = None,
    on_cycle: Callable[[CycleReport], None] | None = None,
    embedder: Callable[[], Embedder | None] | None = None,
) -> TrainingReconciler:
    """The training reconciler of ``cfg`` (the daemon's :class:`~learnerd.daemon.config.Config`): the
    adapter store (crash leftovers removed first) and the journal of injected probes under the state
    directory, whose probes may name only documents under ``docs_dirs`` or the ``[rpc] document``
    (``on_committed``, ``on_cycle``: its hooks); documents train for ``[serve] rag_k``; ``embedder`` gives the
    routing embedder (None: this process's one of ``[embeddings]``, :func:`learnerd.ml.embedders.shared_embedder`).

    Raises:
        JournalError: the probe journal is damaged, or names a document out of that scope.
    """
    layout = cfg.layout
    router = document_router(cfg)
    scope = DocumentScope(layout.docs_roots, [router.resolve(cfg.rpc.document or cfg.probes.document)])
    adapters = adapter_store(cfg)
    for leftover in adapters.recover():
        log.warning("removed an adapter version left half-written by a crash", path=str(leftover))
    return TrainingReconciler(
        adapters,
        cfg.training,
        models_dir=layout.models_dir,
        journal=ProbeJournal(layout.probe_journal, document_allowed=scope),
        new_document_base_model=cfg.probes.base_model,
        on_committed=on_committed,
        on_cycle=on_cycle,
        db_path=layout.store_target,
        served_rag_k=cfg.serve.rag_k,
        embedder=embedder or (lambda: shared_embedder(cfg.embeddings)),
    )


def _build(wiring: Wiring) -> TrainingReconciler:
    def committed(doc_path: str | os.PathLike[str], version: AdapterVersion) -> None:
        wiring.notify(ADAPTERS, AdapterCommit(doc_path, version))

    return training_reconciler(
        wiring.cfg, on_committed=committed, on_cycle=wiring.metrics.cycle, embedder=lambda: wiring.embedder
    )


#: Documents → adapter versions: fed by the training intake (file watch, debounce, probe inbox), not a
#: watch; stopped rather than drained at shutdown; its commits feed every spec watching ``ADAPTERS``.
SPEC = ControllerSpec(
    TrainingReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 6 * 3600.0},
    stage="training",
    model_work=True,
)
