"""The operations the admin API offers on a running daemon, as plain methods returning JSON-able data.

Every method runs on the daemon's event loop (the queues and the SQLite connection belong to it);
only the search's embedding and faiss call go to a worker thread. HTTP lives in
:mod:`learnerd.api` (this class implements its :class:`~learnerd.api.surface.ControlSurface`); errors
are :mod:`learnerd.api.errors` subclasses that it maps to status codes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import numpy as np
import structlog

import learnerd
from learnerd.analyzer.block_ids import block_ids_in_file
from learnerd.api.errors import BadRequest, Conflict, NotFound, TooManyRequests, Unavailable
from learnerd.api.surface import Draining, LogLevel, Paused, Requeued, Status
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.daemon.controllers import TRAINING
from learnerd.daemon.logging import current_level, parse_level, set_log_level
from learnerd.daemon.reload import apply_config
from learnerd.eval.history import last_report
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.embedders import embedder_name
from learnerd.ml.threads import intra_op_threads
from learnerd.reconcilers.evaluation import EvaluationReconciler
from learnerd.reconcilers.probes import document_router
from learnerd.reconcilers.spec import BLOCKS, EXAMPLES, ExampleChange
from learnerd.runtime.workqueue import ControllerRateLimiter
from learnerd.sections import ConfigError
from learnerd.sources.backfill_job import BackfillTracker
from learnerd.store.adapters import AdapterStore, AdapterStoreError, version_name
from learnerd.store.atomic import atomic_write_text
from learnerd.store.blocks import count_blocks, list_block_ids
from learnerd.store.db import transaction as db_transaction
from learnerd.store.embeddings import count_vectors
from learnerd.store.examples import count_examples
from learnerd.store.forget import NothingToForget, check_match, documents_in, forget_in_files, forget_in_store
from learnerd.store.retrieval import SearchHit, describe_hits, nearest, nearest_to
from learnerd.store.suggestions import ServedAnswer, counts
from learnerd.store.tombstones import KINDS, delete_tombstone, load_tombstones

log = structlog.get_logger(__name__)


def count_adapters(store: AdapterStore) -> int:
    """Committed adapter versions of every document in the adapter ``store`` (:mod:`learnerd.store.adapters`;
    on PostgreSQL those with an ``adapter_commits`` row; 0 while there is none)."""
    return sum(len(store.list_versions(key)) for key in store.doc_keys())


def document_status(
    store: AdapterStore,
    document_keys: dict[str, str],
    training: dict[str, dict[str, Any]],
    evaluation: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Per document that has an adapter or a cycle in flight, by path: its ``doc_key``; the version ``served``
    (the store's current one, the last promoted); the candidate in ``training`` (its progress and the
    ``version`` it will be committed as) and the version in ``evaluation`` (its progress), each None when there
    is none; the ``last_score`` (``{"version", "score", "band"}`` of the newest evaluated version, or None); and
    ``rejected`` (``{"version", "reasons", "decided_at"}``: the newest candidate when the promotion gate rejected
    it, else None). ``document_keys``
    maps paths to store keys; ``training`` and ``evaluation`` are those controllers' progress. A document whose
    store entry cannot be read gets an ``error`` instead of what it could not read."""
    keys = {**{path: p["doc_key"] for path, p in training.items()}, **document_keys}
    documents = {}
    for path in sorted({*keys, *evaluation}):
        key = keys.get(path)
        entry: dict[str, Any] = {
            "doc_key": key,
            "served": None,
            "training": None,
            "evaluation": evaluation.get(path),
            "last_score": None,
            "rejected": None,
        }
        try:
            versions = store.list_versions(key) if key is not None else []
            current = store.current(key) if key is not None else None
            last = last_report(store, key) if key is not None else None
            rejected = store.rejected(key) if key is not None else None
        except (AdapterStoreError, OSError) as exc:
            entry["error"] = str(exc)
        else:
            entry["served"] = current.name if current is not None else None
            if path in training:
                following = version_name(versions[-1].number + 1 if versions else 1)
                entry["training"] = {**training[path], "version": following}
            if last is not None:
                version, score = last[0], last[1].score
                entry["last_score"] = {"version": version.name, "score": score.overall, "band": score.band}
            if rejected is not None:
                version, verdict = rejected
                entry["rejected"] = {
                    "version": version.name,
                    "reasons": list(verdict.reasons),
                    "decided_at": verdict.decided_at,
                }
        documents[path] = entry
    return documents


SEARCH_WORKERS = 4
"""Searches embedded and looked up at once (worker threads)."""


class DaemonControl:
    """Status and steering of ``daemon`` while :class:`~learnerd.daemon.service.Service` runs it.

    Args:
        daemon: the running daemon.
        stop: the event that makes the daemon stop intake, drain and return (``drain`` sets it).
        reload_config: re-reads the config file (with the command line's overrides); None when the
            daemon was started without a config file.
        endpoints: addresses served, for the status (``admin_socket``, ``metrics``, ``search``).
        openai_access: who the OpenAI endpoint serves (``{"token", "without_token", "insecure_no_token"}``, see
            :class:`~learnerd.daemon.service.ServiceOptions`), for the status; None when it is off.
        warnings: what the operator must know of how the daemon runs (``--insecure-no-token``), in the status.
        max_k: the largest ``k`` a search may ask for.
        max_pending_searches: searches running or waiting at most (:data:`SEARCH_WORKERS` run at once);
            one more is refused with 429 and ``Retry-After`` rather than queued without bound.
    """

    def __init__(
        self,
        daemon: Daemon,
        stop: anyio.Event,
        *,
        reload_config: Callable[[], Config] | None = None,
        endpoints: dict[str, str | None] | None = None,
        openai_access: dict[str, Any] | None = None,
        warnings: list[str] | None = None,
        max_k: int = 100,
        max_pending_searches: int = 32,
    ) -> None:
        self.daemon = daemon
        self.stop = stop
        self.endpoints = endpoints or {}
        self.openai_access = openai_access
        self.warnings = warnings or []
        self.max_k = max_k
        self._reload_config = reload_config
        self._started = time.monotonic()
        self._running = False
        self._pause_all = False
        self._restored: set[str] = set()  # the controllers restore_paused() made start paused
        self._search_limiter = anyio.CapacityLimiter(SEARCH_WORKERS)
        self.max_pending_searches = max_pending_searches
        self._pending_searches = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        self.backfill_tracker = BackfillTracker(
            reconciled=lambda: daemon.block_controller().stats().reconciles,
            changes=lambda: daemon.summary().changes,
            wait_idle=daemon.wait_idle,
        )

    # ------------------------------------------------------------------ lifecycle hooks (Service)

    def attach(self, task_group: anyio.abc.TaskGroup) -> None:
        """Where background jobs (a backfill) run: the service's task group."""
        self._task_group = task_group

    def restore_paused(self) -> None:
        """Before the daemon runs: the controllers paused before the last restart
        (:attr:`~learnerd.store.layout.StateLayout.paused_controllers`) start paused, so they start nothing,
        not even the keys of the start-up resync (:meth:`~learnerd.daemon.app.Daemon.start_paused`)."""
        self._restored = set(self.daemon.start_paused(self._load_paused()))
        for name in sorted(self._restored):
            log.warning("controller paused before the restart stays paused (learnerd ctl resume)", controller=name)

    def mark_running(self) -> None:
        """Start-up is over (every controller exists): re-apply a ``pause`` of all controllers."""
        self._running = True
        if self._pause_all:
            for controller in self.daemon.controllers.values():
                controller.pause()
            self._save_paused()

    def _load_paused(self) -> list[str]:
        path = self.daemon.cfg.layout.paused_controllers
        try:
            names = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("ignoring an unreadable list of paused controllers", path=str(path), error=str(exc))
            return []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            log.warning("ignoring a list of paused controllers that is not a JSON array of names", path=str(path))
            return []
        return names

    def _save_paused(self) -> None:
        not_wired_yet = {name for name in self._restored if name not in self.daemon.controllers}  # embeddings
        names = sorted({name for name, paused in self._paused().items() if paused} | not_wired_yet)
        try:
            atomic_write_text(self.daemon.cfg.layout.paused_controllers, json.dumps(names) + "\n")
        except OSError as exc:
            log.warning("the paused controllers are not saved: a restart resumes them", error=str(exc))

    @property
    def state(self) -> str:
        """starting (the embedder is loading), running, or draining."""
        if self.stop.is_set():
            return "draining"
        return "running" if self._running else "starting"

    def unready_reason(self) -> str | None:
        """Why the running daemon is not ready: a served model's last load failed its known-answer check
        (:meth:`~learnerd.ml.serving.ServedModels.unready_reason`); None when nothing is wrong."""
        served = self.daemon.served
        return served.unready_reason() if served is not None else None

    # ------------------------------------------------------------------ read

    def status(self) -> Status:
        """Everything ``learnerd ctl status`` shows; see docs/operations.md for the shape."""
        daemon = self.daemon
        cfg = daemon.cfg
        progress = daemon.progress()
        controllers = {}
        for name, controller in daemon.controllers.items():
            stats = controller.stats()
            entry = dataclasses.asdict(stats)
            entry["in_flight"] = list(stats.in_flight)
            entry["progress"] = progress.get(name)
            entry["timeout_s"] = controller.timeout_s
            entry["max_retries"] = controller.max_retries
            limiter = daemon.queues[name].rate_limiter if name in daemon.queues else None
            entry["rate_limiter"] = (
                dataclasses.asdict(limiter.settings()) if isinstance(limiter, ControllerRateLimiter) else None
            )
            controllers[name] = entry
        embedder = daemon.embedder
        job = self.backfill_tracker.current()
        store = adapter_store(cfg)
        try:
            adapters = count_adapters(store)
            documents = document_status(
                store,
                daemon.document_keys,
                progress.get(TRAINING, {}),
                progress.get(EvaluationReconciler.name, {}),
            )
        finally:
            store.close()
        return {
            "version": learnerd.__version__,
            "pid": os.getpid(),
            "state": self.state,
            "uptime_s": round(time.monotonic() - self._started, 3),
            "config_path": str(cfg.path) if cfg.path else None,
            "state_dir": str(cfg.state_dir),
            "log_level": current_level(),
            "endpoints": self.endpoints,
            "openai_access": self.openai_access,
            "embedder": {"name": getattr(embedder, "name", None), "loaded": daemon.embeddings is not None},
            "counts": {
                "blocks": count_blocks(daemon.conn),
                "examples": count_examples(daemon.conn),
                "vectors": count_vectors(daemon.conn),
                "indexed": len(daemon.index),
                "adapters": adapters,
            },
            "controllers": controllers,
            "documents": documents,
            "analyzer": dataclasses.asdict(daemon.analyzer.stats),
            "evaluation_failures": (
                daemon.evaluation.failed_attempts() if EvaluationReconciler.name in daemon.reconcilers else {}
            ),
            "backfill": job.to_json() if job is not None else None,
            "fleet": daemon.fleet.status(list_block_ids(daemon.conn)) if daemon.fleet is not None else None,
            "warnings": [*self.warnings, *(w for r in daemon.reconcilers.values() for w in getattr(r, "warnings", ()))],
            "privacy": {
                "redacted": daemon.analyzer.stats.redactions,
                "refused": dict(daemon.examples.refusals),
                "tombstones": len(load_tombstones(daemon.conn).all),
            },
            "suggestions": counts(daemon.conn),
        }

    # ------------------------------------------------------------------ steer

    def _controllers(self, name: str | None) -> dict[str, Any]:
        if name is None:
            return dict(self.daemon.controllers)
        if name not in self.daemon.controllers:
            known = ", ".join(sorted(self.daemon.controllers))
            raise NotFound(f"no controller named {name!r}; the controllers are: {known}")
        return {name: self.daemon.controllers[name]}

    def _paused(self) -> dict[str, bool]:
        return {name: c.paused for name, c in self.daemon.controllers.items()}

    def pause(self, controller: str | None = None) -> Paused:
        """Stop handing keys to the workers of ``controller`` (None: all); intake keeps queueing. The paused
        set is saved in the state directory: a restart keeps it.

        Raises:
            NotFound: no such controller.
        """
        for name, c in self._controllers(controller).items():
            c.pause()
            log.info("controller paused", controller=name)
        if controller is None:
            self._pause_all = True
        self._save_paused()
        return {"paused": self._paused()}

    def resume(self, controller: str | None = None) -> Paused:
        """Undo :meth:`pause` for ``controller`` (None: all).

        Raises:
            NotFound: no such controller.
        """
        for name, c in self._controllers(controller).items():
            c.resume()
            log.info("controller resumed", controller=name)
        if controller is None:
            self._pause_all = False
        self._save_paused()
        return {"paused": self._paused()}

    def _known_keys(self, controller: str) -> set[str]:
        """The keys ``controller`` reconciles: its reconciler's ``resync_keys()``, and for training also the
        documents the training intake watches."""
        keys = set(self.daemon.reconcilers[controller].resync_keys())
        intake = self.daemon.training_intake
        if controller == TRAINING and intake is not None:
            keys |= {str(p) for p in intake.watcher.documents()}
        return keys

    def requeue(self, controller: str, key: str) -> Requeued:
        """Queue ``key`` on ``controller`` now, with its failure backoff reset.

        Raises:
            NotFound: no such controller, or ``key`` is none of the keys the controller reconciles (its
                resync list: a block id for examples / embeddings, a document path for probes,
                evaluation and training). Conflict: the daemon is draining.
        """
        self._controllers(controller)
        queue = self.daemon.queues[controller]
        if queue.shutting_down or self.stop.is_set():
            raise Conflict("the daemon is draining; nothing new is queued")
        if key not in self._known_keys(controller):
            what = next(spec.key_kind for spec in self.daemon.specs if spec.name == controller)
            raise NotFound(f"controller {controller!r} has no key {key!r} (its keys are {what}s; see ctl status)")
        queue.forget(key)
        queue.add(key)
        log.info("key requeued", controller=controller, key=key)
        return {"controller": controller, "key": key, "queue_depth": len(queue)}

    def start_backfill(self, since: float) -> dict[str, Any]:
        """Enqueue every block with ``updated_at >= since`` (epoch seconds) and follow it in the background.

        Raises:
            Conflict: the daemon is starting or draining, or a backfill is still running.
        """
        if self.state != "running" or self._task_group is None:
            raise Conflict(f"the daemon is {self.state}; retry once it is running")
        if self.backfill_tracker.running:
            raise Conflict("a backfill is already running; see GET /backfill")
        job = self.backfill_tracker.begin(
            since, lambda: self.daemon.enqueue_blocks(list_block_ids(self.daemon.conn, updated_since=since))
        )
        self._task_group.start_soon(self.backfill_tracker.follow, name="backfill")
        return job.to_json()

    def backfill_status(self) -> dict[str, Any] | None:
        job = self.backfill_tracker.current()
        return job.to_json() if job is not None else None

    def drain(self) -> Draining:
        """Stop intake, finish in-flight and queued work (within ``[shutdown] drain_timeout_s``), exit."""
        if not self.stop.is_set():
            log.info("drain requested: stopping intake and draining queues")
            self.stop.set()
        return {"state": "draining", "drain_timeout_s": self.daemon.cfg.shutdown.drain_timeout_s}

    def reload(self) -> dict[str, Any]:
        """Re-read the config file and apply what can change live (see :mod:`learnerd.daemon.reload`).

        Raises:
            Conflict: started without a config file. BadRequest: the file is invalid (nothing applied).
        """
        if self._reload_config is None:
            raise Conflict("the daemon was started without a config file (--config / $LEARNERD_CONFIG)")
        try:
            new = self._reload_config()
        except ConfigError as exc:
            log.error("config reload failed; keeping the running config", error=str(exc))
            raise BadRequest(f"config not reloaded: {exc}") from exc
        return dataclasses.asdict(apply_config(self.daemon, new))

    def log_level(self) -> LogLevel:
        return {"level": current_level()}

    def set_log_level(self, level: str) -> LogLevel:
        """Change the log level until the next change or reload.

        Raises:
            BadRequest: not a level name.
        """
        try:
            parse_level(level)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        previous = set_log_level(level)
        log.info("log level changed", level=current_level(), previous=previous)
        return {"level": current_level(), "previous": previous}

    def record_served(self, answer: ServedAnswer) -> None:
        """Remember an answer the endpoint served (:meth:`~learnerd.daemon.app.Daemon.record_served`)."""
        self.daemon.record_served(answer)

    # ------------------------------------------------------------------ forget

    async def forget(self, kind: str, value: str, dry_run: bool = False) -> dict[str, Any]:
        """``learnerd forget`` in the running daemon (:mod:`learnerd.store.forget`): the tombstone, the examples
        and their vectors go in one transaction, the vectors leave the live index at once (retrieval stops
        returning them before the answer is sent), the documents' sections and the foyle files are removed,
        and every document that lost a section is queued for a training cycle (fresh: its adapter trained on a
        section that is gone). The reconcilers are told too, so a reconcile already in flight cannot bring
        anything back. Returns :meth:`~learnerd.store.forget.ForgetReport.to_json`.

        Raises:
            BadRequest: an unknown ``kind``, an empty ``value``, a ``match`` of fewer than 4 non-space characters,
                a ``source`` that is not an absolute path, or is a file that cannot be read (a path that no longer
                exists forgets the blocks recorded from it). NotFound: an ``example`` / ``block`` id the store does
                not have.
            Conflict: the daemon is draining.
        """
        if kind not in KINDS or not value:
            raise BadRequest(f"forget needs a kind ({', '.join(KINDS)}) and a non-empty value")
        if kind == "match":
            try:
                check_match(value)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        if self.stop.is_set():
            raise Conflict("the daemon is draining; forget offline once it stopped")
        daemon = self.daemon
        source_ids: list[str] = []
        if kind == "source":
            if not os.path.isabs(value):
                raise BadRequest(f"source must be an absolute path, not {value!r}")
            if os.path.exists(value):  # a log file gone since is forgotten by the blocks recorded from it
                try:
                    source_ids = (await anyio.to_thread.run_sync(block_ids_in_file, Path(value))).block_ids
                except OSError as exc:
                    raise BadRequest(f"cannot read {value}: {exc.strerror or exc}") from exc
        try:
            report = forget_in_store(daemon.conn, kind, value, source_block_ids=source_ids, dry_run=dry_run)
        except NothingToForget as exc:
            raise NotFound(str(exc)) from exc
        ids = [e.id for e in report.examples]
        if not dry_run:
            daemon.index.delete(ids)
            if daemon.fleet is not None:
                daemon.fleet.announce_vectors(ids)
        documents, export_dir = forget_scope(daemon.cfg)
        journal = daemon.training.journal if daemon.training is not None else None
        report = await anyio.to_thread.run_sync(forget_in_files, report, documents, export_dir, journal)
        if not dry_run:
            for example in report.examples:
                daemon.notify(EXAMPLES, ExampleChange(example.id, example, None))
            for block_id in report.tombstone.block_ids:
                daemon.notify(BLOCKS, block_id)
            if TRAINING in daemon.queues:
                for document in report.retrain:
                    daemon.queues[TRAINING].add(document)
            log.info(
                "forgotten",
                tombstone=report.tombstone.id,
                kind=kind,
                examples=len(ids),
                documents=len(report.documents),
                export_files=len(report.export_files),
            )
        return report.to_json()

    def tombstones(self) -> list[dict[str, Any]]:
        """Every tombstone, oldest first (``learnerd forget --list``)."""
        return [t.to_json() for t in load_tombstones(self.daemon.conn).all]

    def remove_tombstone(self, tombstone_id: str) -> dict[str, Any]:
        """Delete a tombstone and queue its blocks again, so what it kept out may be learned again
        (``learnerd forget --remove ID``); returns the removed tombstone.

        Raises:
            NotFound: no tombstone has that id.
        """
        with db_transaction(self.daemon.conn):
            stone = delete_tombstone(self.daemon.conn, tombstone_id)
        if stone is None:
            raise NotFound(f"no tombstone has the id {tombstone_id!r} (see learnerd forget --list)")
        # a match also kept out blocks logged after the forget: all of them are looked at again
        self.daemon.enqueue_blocks(list_block_ids(self.daemon.conn) if stone.kind == "match" else stone.block_ids)
        log.info("tombstone removed", tombstone=tombstone_id, kind=stone.kind, blocks=len(stone.block_ids))
        return stone.to_json()

    async def search(self, text: str, k: int, vector: np.ndarray | None = None) -> list[SearchHit]:
        """The ``k`` learned examples nearest to ``text``, best first, from the live index; ``vector``: ``text``'s
        embedding, made already (:meth:`embed`: the chat endpoint embeds a request once, to route and retrieve).

        Raises:
            BadRequest: empty ``text`` or ``k`` outside 1..max_k. Unavailable: the embedder is loading.
            TooManyRequests: ``max_pending_searches`` are already running or waiting (retry in 1 s).
        """
        if not text.strip():
            raise BadRequest("text must not be empty")
        if not 1 <= k <= self.max_k:
            raise BadRequest(f"k must be in 1..{self.max_k}, not {k}")
        embedder = self._embedder()
        with self._pending(), self.daemon.metrics.search_duration.time():
            if vector is None:
                work = functools.partial(_nearest_on_one_thread, embedder, self.daemon.index, text, k)
            else:
                work = functools.partial(nearest_to, self.daemon.index, vector, k)
            hits = await anyio.to_thread.run_sync(work, limiter=self._search_limiter)
            return describe_hits(self.daemon.conn, hits, k)

    @property
    def embedder_name(self) -> str:
        """The configured embedder's model name."""
        return embedder_name(self.daemon.cfg.embeddings)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``texts`` embedded (float32 ``(len(texts), dim)``, unit rows) in a search's worker thread, on one torch
        thread, counted among the searches.

        Raises:
            Unavailable: the embedder is loading. TooManyRequests: as :meth:`search`.
        """
        embedder = self._embedder()
        with self._pending():
            return await anyio.to_thread.run_sync(_embed_on_one_thread, embedder, texts, limiter=self._search_limiter)

    def _embedder(self) -> Any:
        embedder = self.daemon.embedder
        if embedder is None or self.daemon.embeddings is None:
            raise Unavailable("the embedder is still loading; retry in a few seconds")
        return embedder

    @contextlib.contextmanager
    def _pending(self) -> Iterator[None]:
        """One more search (or embedding) running or waiting; :class:`TooManyRequests` beyond the maximum."""
        if self._pending_searches >= self.max_pending_searches:
            raise TooManyRequests(f"{self._pending_searches} searches are already queued; retry shortly")
        self._pending_searches += 1
        try:
            yield
        finally:
            self._pending_searches -= 1


def forget_scope(cfg: Config) -> tuple[list[Path], Path | None]:
    """Where a forget looks (:func:`~learnerd.store.forget.forget_in_files`): the routed documents and every
    ``.dlm`` under ``docs_dirs``, and the foyle export directory (None without ``[export.foyle] dir``)."""
    documents = documents_in(cfg.layout.docs_roots, document_router(cfg).documents())
    return documents, Path(cfg.export.foyle.dir) if cfg.export.foyle.dir else None


def _nearest_on_one_thread(embedder: Any, index: Any, text: str, k: int) -> Any:
    """:func:`~learnerd.store.retrieval.nearest` with one torch intra-op thread: a query is one short text,
    embedded in milliseconds on one core, and more threads only spin against generation and ingestion
    (``benchmarks/bench_serve.py``: search p99 while 4 streams generate)."""
    with intra_op_threads(1):
        return nearest(embedder, index, text, k)


def _embed_on_one_thread(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    """``embedder.embed(texts)`` with one torch intra-op thread (as :func:`_nearest_on_one_thread`)."""
    with intra_op_threads(1):
        return embedder.embed(list(texts))
