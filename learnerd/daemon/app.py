"""The daemon's wiring and lifecycle — the one module of ``daemon/`` that builds reconcilers (from their specs).

Data flow (docs/architecture.md), as the specs' watches declare it (:mod:`learnerd.reconcilers.spec`)::

    log files ─► Analyzer ─BLOCKS(block id)─► "examples" ─► ExamplesReconciler ─EXAMPLES(change)─┐
        ┌──────────────────────────────────────────────────────────────────────────────────────┘
        ├─► "embeddings" (example id) ─► EmbeddingsReconciler
        ├─► "foyle_export" (example id, with [export.foyle] dir) ─► FoyleExportReconciler
        └─► "probes" (document paths) ─► ProbesReconciler
    .dlm saved / POST /rpc ─► TrainingIntake (watch, debounce, journal) ─► "training" ─► TrainingReconciler
        ─ADAPTERS(candidate)─► "evaluation" (document path) ─► EvaluationReconciler ─(auto_harvest)─► the document
             promotion gate ─PROMOTIONS(promoted)─► "vllm_export" ([export.vllm] dir) ─► VllmExportReconciler
                                                  ├► "gguf_export" ([export.gguf] dir) ─► GgufExportReconciler
                                                  └► the served models (hot swap), learnerd_adapter_version

The table is :data:`learnerd.daemon.controllers.CONTROLLERS`; :meth:`Daemon.notify` fans every producer's
event out to the specs that watch it. One SQLite connection and one event loop serve the analyzer and the
reconcilers (no transaction is held across an ``await``); the embedder and the probes reconciler's file
work run in worker threads.

Start-up is level-triggered, like an informer's initial list: every block id goes on the "examples"
queue, every example (and every orphan vector) on "embeddings", every routable document on "probes",
every document with an adapter on "evaluation" (it evaluates a version that has no report, and decides on a
candidate that has no verdict: a promotion interrupted by a crash is made then).
Reconcilers skip whatever is already current, so a restart after a crash (``kill -9`` between a
block's commit and its example's) converges, and a restart with nothing new changes nothing.

Shutdown drains in pipeline order: intake stops, then each queue is shut down with drain (its
in-flight and queued keys finish; upstream reconciles may still add downstream), all within
``[shutdown] drain_timeout_s``; past it, whatever is still running is cancelled. A controller whose spec
says ``shutdown="cancel"`` (evaluation: minutes of model work) is not drained but cancelled at once, at the
start of the drain: its reconcile in flight stops (an evaluation within one batch) and writes nothing, and
its queued keys are left — the next start's resync lists them again. A paused controller starts nothing,
not even in the drain: its in-flight reconciles finish, its queued keys are left for the next start.
Watermarks need no flushing: each batch's watermark commits with the batch's blocks.

On PostgreSQL (``[store] url``) the daemon is one replica of a fleet (:mod:`learnerd.fleet`): its
queues route keys to their owners, its reconcilers run each key under the key's advisory lock, and
its resync lists only the keys it owns.

Training (``[training] enabled``, on by default) is not drained but stopped: a cycle in flight is
cancelled (its training process killed, nothing committed, ``current`` unchanged) and queued documents
are dropped — the next start lists every document again and retrains those whose rows changed. Accepted
RPC probes are already in the journal. ``run`` trains continuously (file watch, debounce, RPC);
``run_once`` trains each document whose rows changed once, after the pipeline has drained (so after the
probes reconciler's writes); ``backfill`` never trains.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import structlog
from prometheus_client import CollectorRegistry

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.ingest import STORE_ERRORS
from learnerd.analyzer.stats import AnalyzerStats
from learnerd.api.blocks import BlocksEndpoint
from learnerd.api.rpc import RpcServer
from learnerd.daemon import controllers, wiring
from learnerd.daemon.config import Config
from learnerd.daemon.controllers import MODEL_QUEUES, TRAINING
from learnerd.daemon.logging import use_redactor
from learnerd.daemon.metrics import DaemonMetrics
from learnerd.eval.history import adapter_documents, current_versions
from learnerd.fleet.fleet import fleet_for
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.embedders import Embedder, LazyEmbedder, embedder_dim, embedder_name, make_embedder
from learnerd.ml.serving import ServedModels
from learnerd.privacy.policy import category
from learnerd.privacy.screen import Screen
from learnerd.reconcilers.embeddings import EmbeddingsReconciler
from learnerd.reconcilers.evaluation import EvaluationReconciler
from learnerd.reconcilers.examples import ExamplesReconciler
from learnerd.reconcilers.probes import ProbesReconciler, document_router
from learnerd.reconcilers.spec import (
    BLOCKS,
    EXAMPLES,
    PROMOTIONS,
    AdapterPromotion,
    ControllerSpec,
    ExampleChange,
)
from learnerd.reconcilers.training import TrainingReconciler
from learnerd.runtime.controller import Controller, ControllerStats
from learnerd.runtime.controller_metrics import ControllerMetrics
from learnerd.runtime.reconcile import ProgressReporter, Reconciler
from learnerd.runtime.workqueue import PrometheusMetricsProvider, RateLimitingQueue, default_controller_rate_limiter
from learnerd.sources.served_answers import record_answer
from learnerd.sources.training_intake import TrainingIntake
from learnerd.store import db, suggestions
from learnerd.store.blocks import count_blocks, list_block_ids
from learnerd.store.embeddings import count_vectors, load_index
from learnerd.store.examples import count_examples, get_examples
from learnerd.store.ingest_log import IngestLog
from learnerd.store.state_dir import secure_state_dir
from learnerd.store.suggestions import ServedAnswer

log = structlog.get_logger(__name__)


@dataclass
class RunSummary:
    """What a run did: table sizes at the end, ingestion counters, per-controller stats and changes;
    ``refused_examples``: the examples the probes reconciler wrote no section for, each
    ``{"example_id", "document", "reason"}`` (:meth:`~learnerd.reconcilers.probes.ProbesReconciler.refusals`);
    ``recall``: per evaluated document, its current adapter version and the probes the base and the
    adapter answer exactly, and how many pass the recall probe (exact or similar enough, as the gate counts)
    (``{"version", "before", "after", "probes", "passed"}``); ``undertrained``: per document
    whose last training cycle trained too little, the ``undertrained: <cause>; <fix>`` line;
    ``refused_by_policy``: the blocks the privacy policy kept from becoming examples, by reason
    (:mod:`learnerd.privacy.policy`)."""

    blocks: int
    examples: int
    vectors: int
    embedder_calls: int
    elapsed_s: float
    analyzer: AnalyzerStats
    controllers: dict[str, ControllerStats]
    changes: dict[str, dict[str, int]] = field(default_factory=dict)
    refused_examples: list[dict[str, str]] = field(default_factory=list)
    recall: dict[str, dict[str, int | str]] = field(default_factory=dict)
    undertrained: dict[str, str] = field(default_factory=dict)
    refused_by_policy: dict[str, int] = field(default_factory=dict)

    def changed_anything(self) -> bool:
        return any(v for counts in self.changes.values() for v in counts.values())


class Daemon:
    """learnerd's process: store, analyzer, workqueues and controllers, wired together.

    Args:
        cfg: the configuration; ``state_dir`` is secured before anything is created in it
            (:func:`~learnerd.store.state_dir.secure_state_dir`: created 0700 if missing).
        embedder: an already loaded embedder (tests share one); by default the configured one is
            loaded in a worker thread at start, while ingestion already runs.
        registry: the prometheus registry every metric goes on (a fresh one by default).
        clock: wall clock, epoch seconds, stamped on rows as ``updated_at``.
        rpc_token: the bearer token of the RPC server (needed when ``[rpc] listen`` is set).

    Raises:
        UnsafeStateDir: the state directory is not ours, or holds another user's files.
        ValueError: ``[rpc] listen`` is set without a token, or with training disabled.
        JournalError: the probe journal is damaged, or names a document outside the document roots.

    Use :meth:`run` (until ``stop`` is set), :meth:`run_once` or :meth:`backfill`, then :meth:`close`.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        embedder: Embedder | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        rpc_token: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.registry = registry or CollectorRegistry()
        layout = cfg.layout
        secure_state_dir(layout.root)
        self.conn = db.connect(layout.store_target)
        self.fleet = fleet_for(cfg, self.conn, embedder_name(cfg.embeddings), MODEL_QUEUES)
        self.embedder = embedder
        self.index = load_index(self.conn, embedder_name(cfg.embeddings), embedder_dim(cfg.embeddings))
        if self.fleet is not None:
            self.fleet.index = self.index
        self.router = document_router(cfg)
        self._queue_metrics = PrometheusMetricsProvider(self.registry)
        self._controller_metrics = ControllerMetrics(self.registry)
        self.metrics = DaemonMetrics(self.registry)
        #: The specs wired in this daemon (training only when enabled, optional ones when enabled), in order.
        self.specs: tuple[ControllerSpec, ...] = tuple(
            spec
            for spec in controllers.CONTROLLERS
            if (spec.stage == "pipeline" or cfg.training.enabled) and (spec.enabled is None or spec.enabled(cfg))
        )
        #: This daemon's pipeline queues, in drain order.
        self.pipeline: tuple[str, ...] = tuple(spec.name for spec in self.specs if spec.stage == "pipeline")
        #: The daemon's own listeners of a producer's events, beside the specs' watches (see :meth:`notify`).
        self._listeners: dict[str, list[Callable[[Any], None]]] = {}
        if not cfg.training.enabled and cfg.rpc.listen:
            raise ValueError("the RPC server feeds training; it cannot run with [training] enabled = false")
        if cfg.rpc.listen and not rpc_token:
            raise ValueError("the RPC server needs a bearer token")
        self.queues: dict[str, RateLimitingQueue[str]] = {spec.name: self._queue(spec.name) for spec in self.specs}
        self.reconcilers: dict[str, Reconciler] = {}
        self.controllers: dict[str, Controller] = {}
        self._start_paused: set[str] = set()  # controllers that start paused (see start_paused)
        for spec in self.specs:
            if not spec.needs_embedder:
                self._wire(spec)
        self.metrics.watch_progress(self.progress)
        #: Document path → its key in the adapter store (its ``dlm_id``), for every document known to have an
        #: adapter: those with a version at start-up (whose current version's ``learnerd_adapter_version`` is set
        #: now), then each one promoted.
        self.document_keys: dict[str, str] = self._known_adapters()
        self.listen(PROMOTIONS, self._adapter_promoted)
        #: Events accepted by ``POST /v1/blocks``, tailed by the analyzer beside ``log_dirs`` (always, so events
        #: acknowledged before a restart without ``--listen-rpc`` are still read).
        self.ingest = IngestLog(layout.ingest_dir)
        #: The one screen of every intake (``[privacy]``, :mod:`learnerd.privacy.screen`): its redactor replaces secrets
        #: before anything is stored (the analyzer's records, POST /v1/blocks, the RPC's probes, served answers; every
        #: intake's count is the analyzer's ``redactions``), its policy refuses RPC probes and (in the examples
        #: reconciler) blocks.
        self.screen = Screen(cfg.privacy)
        self.redactor = self.screen.redactor
        use_redactor(self.redactor)  # debug log events pass it too
        self.analyzer = Analyzer(
            self.conn,
            [*cfg.log_dirs, self.ingest.directory],
            lambda block_id: self.notify(BLOCKS, block_id),
            cfg.analyzer,
            clock=clock,
            registry=self.registry,
            host=self.fleet.host if self.fleet is not None else "",
            redactor=self.redactor,
            join_window_s=cfg.suggestions.join_window_s,
        )
        self.metrics.watch_suggestions(lambda: suggestions.counts(self.conn))
        self._started = time.monotonic()
        self._serve_scopes: list[anyio.CancelScope] = []  # the running task group's and the drain's
        self.training_intake: TrainingIntake | None = None
        self.rpc: RpcServer | None = None
        #: The models of the OpenAI-compatible endpoint (``[serve] listen``), else None.
        self.served: ServedModels | None = wiring.served_models(cfg) if cfg.serve.listen else None
        if self.served is not None:
            self.listen(PROMOTIONS, self._serve_promoted)
        if self.fleet is not None and self.served is not None:
            self.fleet.adapters_changed = self.served.refresh
        if self.training is not None:
            self._wire_training_intake(rpc_token)

    def _queue(self, name: str) -> RateLimitingQueue[str]:
        queue = RateLimitingQueue(
            name, rate_limiter=default_controller_rate_limiter(self.cfg.workqueue), metrics=self._queue_metrics
        )
        return self.fleet.route(queue) if self.fleet is not None else queue  # type: ignore[return-value]  # RoutedQueue forwards the rest (__getattr__)

    def _wire(self, spec: ControllerSpec) -> Controller:
        reconciler = self.reconcilers[spec.name] = spec.build(self)
        c = self.cfg.controller(spec.name)
        controller = self.controllers[spec.name] = Controller(
            self.fleet.own(reconciler) if self.fleet is not None else reconciler,
            self.queues[spec.name],
            workers=c.workers,
            timeout_s=c.timeout_s,
            max_retries=c.max_retries,
            metrics=self._controller_metrics,
            paused=spec.name in self._start_paused,
        )
        return controller

    def start_paused(self, names: Iterable[str]) -> list[str]:
        """Have the controllers ``names`` start paused; call it before :meth:`run`. They start nothing,
        not even the keys the start-up resync queues, until resumed: the ones wired already are paused
        now, before any of their workers runs, and one wired later (embeddings, once its embedder has
        loaded) is created paused. Returns the names among ``names`` that this daemon wires."""
        known = [name for name in names if name in self.queues]
        self._start_paused.update(known)
        for name in known:
            if name in self.controllers:
                self.controllers[name].pause()
        return known

    def _wire_training_intake(self, rpc_token: str | None) -> None:
        """What feeds the "training" queue (file watch, debounce, probe inbox) and the RPC server."""
        cfg, training = self.cfg, self.training
        assert training is not None
        roots = cfg.layout.docs_roots
        for root in roots:
            root.mkdir(parents=True, exist_ok=True)
        address = cfg.rpc.address()
        self.training_intake = intake = TrainingIntake(
            cfg.training,
            cfg.analyzer,
            training,
            self.queues[TRAINING],
            roots=roots,
            files=self.router.documents(),
            rpc_document=self.rpc_document(),
            inbox_capacity=cfg.rpc.capacity if address is not None else None,
            workers=cfg.controller(TRAINING).workers,
        )
        if address is not None and intake.inbox is not None and rpc_token:
            self.rpc = RpcServer(
                intake.inbox,
                token=rpc_token,
                document=str(self.rpc_document()),
                eta=intake.eta,
                host=address[0],
                port=address[1],
                blocks=BlocksEndpoint(
                    self.ingest,
                    max_line_bytes=cfg.analyzer.max_line_bytes,
                    registry=self.registry,
                    redactor=self.redactor,
                    on_redacted=self.analyzer.count_redactions,
                ),
                screen=self.screen,
                on_redacted=self.analyzer.count_redactions,
                on_refused=lambda reason: self.examples.refusals.update([category(reason)]),
            )

    # The reconcilers by their role (None until wired: embeddings waits for the embedder); each spec's
    # reconciler is under the spec's name, so these are downcasts.
    @property
    def examples(self) -> ExamplesReconciler:
        return cast(ExamplesReconciler, self.reconcilers[ExamplesReconciler.name])

    @property
    def embeddings(self) -> EmbeddingsReconciler | None:
        return cast(EmbeddingsReconciler | None, self.reconcilers.get(EmbeddingsReconciler.name))

    @property
    def probes(self) -> ProbesReconciler:
        return cast(ProbesReconciler, self.reconcilers[ProbesReconciler.name])

    @property
    def evaluation(self) -> EvaluationReconciler:
        return cast(EvaluationReconciler, self.reconcilers[EvaluationReconciler.name])

    @property
    def training(self) -> TrainingReconciler | None:
        return cast(TrainingReconciler | None, self.reconcilers.get(TRAINING))

    def require_embedder(self) -> Embedder:
        """The loaded embedder (a spec that ``needs_embedder`` is built only after it loaded)."""
        assert self.embedder is not None, "the embeddings controller is wired after the embedder loads"
        return self.embedder

    def rpc_document(self) -> Path:
        """The document injected probes go to: ``[rpc] document``, else the ``[probes]`` document."""
        return self.router.resolve(self.cfg.rpc.document or self.cfg.probes.document)

    # ------------------------------------------------------------------ wiring callbacks

    def notify(self, source: str, event: Any) -> None:
        """Fan an event of ``source`` (:data:`~learnerd.reconcilers.spec.BLOCKS`, ``EXAMPLES``, ``ADAPTERS``)
        out: each wired spec watching it gets the keys its watch maps the event to, each listener the event."""
        for spec in self.specs:
            for key in spec.keys_for(self, source, event):
                self.queues[spec.name].add(key)
        for listener in self._listeners.get(source, ()):
            listener(event)

    def listen(self, source: str, listener: Callable[[Any], None]) -> None:
        """Call ``listener(event)`` for every event of ``source`` (after the specs' queues got their keys)."""
        self._listeners.setdefault(source, []).append(listener)

    def _known_adapters(self) -> dict[str, str]:
        """The documents under ``docs_dirs`` with an adapter version, promoted or a candidate (path → key); their
        current versions exported as ``learnerd_adapter_version``."""
        store = adapter_store(self.cfg)
        try:
            current = current_versions(store, self.cfg.layout.docs_roots)
            known = adapter_documents(store, self.cfg.layout.docs_roots)
        finally:
            store.close()
        self.metrics.current_adapters({str(path): version.number for path, version in current.items()})
        return {str(path): version.doc_key for path, version in known.items()}

    def _adapter_promoted(self, promotion: AdapterPromotion) -> None:
        self.document_keys[str(promotion.doc_path)] = promotion.version.doc_key
        self.metrics.promoted(str(promotion.doc_path), promotion.version.number)

    def progress(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Each controller whose reconciler reports progress (a
        :class:`~learnerd.runtime.reconcile.ProgressReporter`: training, evaluation) → its keys in flight →
        their progress."""
        return {
            name: {key: dict(p) for key, p in r.progress().items()}
            for name, r in self.reconcilers.items()
            if isinstance(r, ProgressReporter)
        }

    def _serve_promoted(self, promotion: AdapterPromotion) -> None:
        """Serve a promoted version to new chat completions (``[serve]``; requests in flight finish on the
        version they started with)."""
        assert self.served is not None
        self.served.adapter_promoted(promotion.version, wiring.served_model(promotion.doc_path))

    def record_served(self, answer: ServedAnswer) -> str | None:
        """Remember an answer served: redacted, then a served block and an open suggestion in one transaction
        (:func:`learnerd.sources.served_answers.record_answer`); returns the block id, or None when the store
        failed (logged: the answer is still given, unremembered)."""
        try:
            return record_answer(self.conn, answer, self.redactor, self.clock())
        except STORE_ERRORS as exc:
            log.warning("served answer not remembered: the store failed", document=answer.document, error=str(exc))
            return None

    def prune_suggestions(self) -> int:
        """Remove the suggestions older than ``[suggestions] retention_days`` (:func:`learnerd.store.suggestions.prune`)
        and return how many; a store failure is logged (the next pass retries) and counts as none."""
        retention_days = self.cfg.suggestions.retention_days
        try:
            with db.transaction(self.conn):
                removed = suggestions.prune(self.conn, self.clock() - retention_days * 86400.0)
        except STORE_ERRORS as exc:
            log.warning("expired suggestions not removed; retrying later", error=str(exc))
            return 0
        if removed:
            log.info("expired suggestions removed", removed=removed, retention_days=retention_days)
        return removed

    async def _prune_suggestions(self) -> None:
        """:meth:`prune_suggestions` at start-up, then every ``[suggestions] prune_interval_s``."""
        while True:
            self.prune_suggestions()
            await anyio.sleep(self.cfg.suggestions.prune_interval_s)

    def enqueue_blocks(self, block_ids: Iterable[str]) -> int:
        """Put blocks and everything derived from them on their queues; return how many blocks.

        Each block is a :data:`~learnerd.reconcilers.spec.BLOCKS` event, and its current example (or its
        absence) an :data:`~learnerd.reconcilers.spec.EXAMPLES` change from nothing, so every watcher
        looks again (example id = block id). Reconcilers skip what is current, so this is always safe
        (backfill, resync).
        """
        ids = list(block_ids)
        examples = get_examples(self.conn, ids)
        for key in ids:
            self.notify(BLOCKS, key)
            self.notify(EXAMPLES, ExampleChange(key, None, examples.get(key)))
        return len(ids)

    def resync(self) -> None:
        """The level-triggered initial list: every key of every pipeline controller goes on its queue (in a
        fleet: every key this replica owns)."""
        with self.fleet.resyncing() if self.fleet is not None else contextlib.nullcontext():
            for name in self.pipeline:
                if name not in self.reconcilers:
                    continue  # not wired yet (embeddings, while the embedder loads): run lists it once it is
                for key in self.reconcilers[name].resync_keys():
                    self.queues[name].add(key)
        log.info("resync", **{name: len(self.queues[name]) for name in self.pipeline})

    def _resync_all(self) -> None:
        """The fleet's resync (membership changed: keys moved between replicas): every pipeline key, and
        every document for training, so a document a dead replica was training is trained by its new owner."""
        self.resync()
        self.resync_training()

    def resync_training(self) -> None:
        """The training queue's initial list: every watched document and every one with pending probes."""
        if self.training_intake is not None:
            log.info("resync training", documents=self.training_intake.resync())

    # ------------------------------------------------------------------ lifecycle

    async def _start_embeddings(self, tg: anyio.abc.TaskGroup, *, lazy: bool, stop: anyio.Event | None) -> bool:
        """Load the embedder (``lazy``: MiniLM only at its first use, so a run with nothing to embed never
        loads it; an OpenAI-compatible endpoint is always checked now, to fail fast), then start the
        controllers that need it. ``stop`` set during the load abandons it (the loading thread is a daemon
        thread: the process exits without waiting for it) and starts nothing; returns False then, else True.

        Raises:
            EmbedderError: the embedder cannot be loaded or the endpoint does not answer.
        """
        if self.embedder is None:
            if lazy and self.cfg.embeddings.backend == "minilm":
                self.embedder = LazyEmbedder(self.cfg.embeddings)
            else:
                log.info("loading embedder", backend=self.cfg.embeddings.backend)
                self.embedder = await _unless_stopped(stop, tg, make_embedder, self.cfg.embeddings)
        if self.embedder is None or (stop is not None and stop.is_set()):
            log.info("stopped during start-up: the embedder's load is abandoned, no controller needing it starts")
            return False
        for spec in self.specs:
            if spec.needs_embedder:
                tg.start_soon(self._wire(spec).run, name=f"controller-{spec.name}")
        return True

    async def _serve(
        self, body: Callable[[anyio.abc.TaskGroup], Any], *, intake: bool, stop: anyio.Event | None = None
    ) -> None:
        """Start the controllers (and, with ``intake``, the analyzer), run ``body``, then drain. ``stop`` set
        while the embedder loads skips ``body`` (:meth:`_start_embeddings`)."""
        async with anyio.create_task_group() as tg:
            for name, controller in self.controllers.items():
                tg.start_soon(controller.run, name=f"controller-{name}")
            analyzer_scope = anyio.CancelScope()
            if intake:

                async def analyze() -> None:
                    with analyzer_scope:
                        async with anyio.create_task_group() as intake_tg:
                            intake_tg.start_soon(self._prune_suggestions, name="prune-suggestions")
                            await self.analyzer.run()

                tg.start_soon(analyze, name="analyzer")
            self._serve_scopes = [tg.cancel_scope]
            fleet_scope = anyio.CancelScope()
            if intake and self.fleet is not None:
                await tg.start(self._run_fleet, fleet_scope, name="fleet")
            training_scope, rpc_scope = anyio.CancelScope(), anyio.CancelScope()  # a scope enters one `with` only
            if intake and self.training_intake is not None:
                await tg.start(self._run_training_intake, training_scope, name="training-intake")
                if self.rpc is not None:
                    await tg.start(self._run_rpc, rpc_scope, name="rpc-server")
            loaded = await self._start_embeddings(tg, lazy=not intake, stop=stop)
            try:
                if loaded:
                    await body(tg)
            finally:
                analyzer_scope.cancel()
                training_scope.cancel()
                rpc_scope.cancel()
                with anyio.CancelScope(shield=True) as drain_scope:
                    self._serve_scopes.append(drain_scope)
                    self._stop_training()
                    await self._drain(tg)
                fleet_scope.cancel()
                self._serve_scopes = []

    async def _run_fleet(
        self, scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        assert self.fleet is not None
        with scope:
            await self.fleet.run(self._resync_all, task_status=task_status)

    async def _run_training_intake(
        self, scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        assert self.training_intake is not None
        with scope:
            await self.training_intake.run(task_status=task_status)

    async def _run_rpc(
        self, scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        assert self.rpc is not None
        with scope:
            await self.rpc.serve(task_status=task_status)

    def _stop_training(self) -> None:
        """Drop queued training keys and cancel the cycles in flight (see the module docstring)."""
        if self.training is not None:
            self.queues[TRAINING].shutdown()
            self.training.stop()

    async def _drain(self, tg: anyio.abc.TaskGroup) -> None:
        """Cancel the ``shutdown="cancel"`` controllers and drain the others in pipeline order (see the module
        docstring), within ``[shutdown] drain_timeout_s``; past it, cancel whatever still runs."""
        cancelled = {spec.name for spec in self.specs if spec.stage == "pipeline" and spec.shutdown == "cancel"}
        with anyio.move_on_after(self.cfg.shutdown.drain_timeout_s) as scope:
            async with anyio.create_task_group() as stopping:
                for name in self.pipeline:
                    if name in cancelled:
                        stopping.start_soon(functools.partial(self._shutdown_controller, name, cancel=True))
                for name in self.pipeline:
                    if name not in cancelled:
                        await self._shutdown_controller(name, cancel=False)
        if scope.cancelled_caught:
            log.warning("drain timed out; cancelling in-flight work", timeout_s=self.cfg.shutdown.drain_timeout_s)
            for queue in self.queues.values():
                queue.shutdown()
            tg.cancel_scope.cancel()

    async def _shutdown_controller(self, name: str, *, cancel: bool) -> None:
        controller = self.controllers.get(name)
        if controller is None:  # never wired (the embedder failed to load): nothing reconciles its queue
            self.queues[name].shutdown()
        else:
            await controller.shutdown(cancel=cancel)

    def stop_now(self) -> None:
        """Stop at once (a second SIGINT): cancel the drain in progress and every task; keys in flight
        are abandoned (reconcilers are idempotent: a restart redoes them). A blocking call already in a
        worker thread (an embedding batch) finishes first."""
        self._stop_training()
        for scope in self._serve_scopes:
            scope.cancel()

    async def wait_idle(self) -> None:
        """Wait until every queue is idle at the same moment (nothing queued, in flight or delayed)."""
        while not all(q.idle for q in self.queues.values()):
            for queue in self.queues.values():
                await queue.wait_idle()

    async def run(self, stop: anyio.Event, started: Callable[[], None] | None = None) -> RunSummary:
        """Run as a daemon until ``stop`` is set, then drain and return the summary.

        ``started()`` is called once every controller runs (the embedder is loaded) and the initial
        resync is queued: the moment the daemon serves (``READY=1``).
        """

        async def body(tg: anyio.abc.TaskGroup) -> None:
            self.resync()
            self.resync_training()
            if started is not None:
                started()
            await stop.wait()
            log.info("stopping: intake stopped, draining queues")

        await self._serve(body, intake=True, stop=stop)
        return self.summary()

    async def run_once(self, stop: anyio.Event | None = None) -> RunSummary:
        """Ingest what the logs hold now, reconcile everything, drain, return the summary.

        Setting ``stop`` ends the run early (a signal): intake stops and the queues drain as in :meth:`run`.
        """

        async def body(tg: anyio.abc.TaskGroup) -> None:
            async with anyio.create_task_group() as work:
                if stop is not None:

                    async def cancel_on_stop() -> None:
                        await stop.wait()
                        work.cancel_scope.cancel()

                    work.start_soon(cancel_on_stop)
                self.prune_suggestions()
                self.resync()
                await self.analyzer.sync()
                await self.wait_idle()
                self.resync_training()  # after the pipeline's document writes: one cycle per changed document
                await self.wait_idle()
                work.cancel_scope.cancel()

        await self._serve(body, intake=False, stop=stop)
        return self.summary()

    async def backfill(self, since: float, progress: Callable[[int, int], None] | None = None) -> RunSummary:
        """Re-enqueue every block with ``updated_at >= since`` (epoch seconds) and reconcile until idle.

        ``progress(done, total)`` is called as the "examples" controller works through the blocks.
        """

        async def body(tg: anyio.abc.TaskGroup) -> None:
            base = self.block_controller().stats().reconciles
            total = self.enqueue_blocks(list_block_ids(self.conn, updated_since=since))
            log.info("backfill", since=since, blocks=total)
            async with anyio.create_task_group() as reporter:
                if progress is not None:
                    reporter.start_soon(self._report_progress, base, total, progress)
                await self.wait_idle()
                reporter.cancel_scope.cancel()
            if progress is not None:
                progress(total, total)

        await self._serve(body, intake=False)
        return self.summary()

    async def _report_progress(self, base: int, total: int, progress: Callable[[int, int], None]) -> None:
        examples = self.block_controller()
        while (done := min(total, examples.stats().reconciles - base)) < total:
            progress(done, total)
            await anyio.sleep(0.1)

    def block_controller(self) -> Controller:
        """The controller fed by blocks (the examples controller): a backfill's progress is its reconciles."""
        return next(self.controllers[s.name] for s in self.specs if any(w.source == BLOCKS for w in s.watches))

    def summary(self) -> RunSummary:
        return RunSummary(
            blocks=count_blocks(self.conn),
            examples=count_examples(self.conn),
            vectors=count_vectors(self.conn),
            embedder_calls=getattr(self.embedder, "calls", 0),
            elapsed_s=time.monotonic() - self._started,
            analyzer=self.analyzer.stats,
            controllers={name: c.stats() for name, c in self.controllers.items()},
            changes={name: dict(r.changes) for name, r in self.reconcilers.items()},
            refused_examples=self.probes.refusals() if ProbesReconciler.name in self.reconcilers else [],
            recall=dict(self.evaluation.recall) if EvaluationReconciler.name in self.reconcilers else {},
            refused_by_policy=dict(self.examples.refusals),
            undertrained=dict(self.training.undertrained) if self.training is not None else {},
        )

    def close(self) -> None:
        if self.served is not None:
            self.served.close()
        self.analyzer.close()
        if self.training is not None and self.training.journal is not None:
            self.training.journal.close()
        if self.fleet is not None:
            self.fleet.close()
        self.conn.close()


async def _unless_stopped(
    stop: anyio.Event | None, tg: anyio.abc.TaskGroup, func: Callable[..., Any], *args: Any
) -> Any:
    """``func(*args)`` run in a daemon thread; None when ``stop`` is set first. The thread is then abandoned: it runs
    on, and the interpreter exits without waiting for it (anyio's worker threads are not daemon threads, so a
    stop during a minute-long model load would otherwise wait for the load). Exceptions of ``func`` propagate."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def work() -> None:
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # handed to the waiter, who re-raises it
            future.set_exception(exc)

    threading.Thread(target=work, name=f"load-{getattr(func, '__name__', 'model')}", daemon=True).start()
    if stop is None:
        return await asyncio.wrap_future(future)
    result = None
    with anyio.CancelScope() as waiting:
        watcher = anyio.CancelScope()

        async def cancel_on_stop() -> None:
            with watcher:
                await stop.wait()
                waiting.cancel()

        tg.start_soon(cancel_on_stop, name="stop-during-start-up")
        try:
            result = await asyncio.wrap_future(future)
        finally:
            watcher.cancel()
    return result
