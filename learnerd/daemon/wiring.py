"""Reconcilers built from the configuration: the one place that maps settings to constructor arguments.

The daemon's controller table (:data:`learnerd.daemon.app.CONTROLLERS`) and the foreground commands
(``learnerd train``) build their reconcilers here, so a reconciler is composed the same way everywhere.
Reconcilers themselves take explicit arguments, never the whole :class:`~learnerd.config.Config`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from learnerd.config import Config
from learnerd.reconcilers.evaluation import EvaluationReconciler
from learnerd.reconcilers.probes import ProbesReconciler
from learnerd.reconcilers.training import TrainingReconciler
from learnerd.store.adapters import AdapterStore, AdapterVersion
from learnerd.store.probe_journal import ProbeJournal
from learnerd.store.routing import DocumentRouter

log = structlog.get_logger(__name__)


def document_router(cfg: Config) -> DocumentRouter:
    """Example → document, from ``[probes]`` (relative names under the first docs root)."""
    return DocumentRouter(cfg.probes.document, cfg.probes.by_language, cfg.layout.docs_base)


def probes_reconciler(cfg: Config, router: DocumentRouter | None = None, **hooks: object) -> ProbesReconciler:
    """The probes reconciler of ``cfg`` (``hooks``: its test hooks, ``before_replace`` / ``monotonic``)."""
    return ProbesReconciler(
        router or document_router(cfg),
        db_path=cfg.layout.db_path,
        base_model=cfg.probes.base_model,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
        rewrite_interval_s=cfg.probes.rewrite_interval_s,
        **hooks,  # type: ignore[arg-type]
    )


def evaluation_reconciler(cfg: Config) -> EvaluationReconciler:
    """The evaluation reconciler of ``cfg``."""
    return EvaluationReconciler(
        cfg.evaluation,
        adapters=AdapterStore(cfg.layout.adapters_dir),
        models_dir=cfg.layout.models_dir,
        docs_roots=cfg.layout.docs_roots,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
    )


def training_reconciler(
    cfg: Config, on_committed: Callable[[str | os.PathLike[str], AdapterVersion], None] | None = None
) -> TrainingReconciler:
    """The training reconciler of ``cfg``: the adapter store (crash leftovers removed first) and the
    journal of injected probes under the state directory.

    Raises:
        JournalError: the probe journal is damaged.
    """
    layout = cfg.layout
    adapters = AdapterStore(layout.adapters_dir)
    for leftover in adapters.recover():
        log.warning("removed an adapter version left half-written by a crash", path=str(leftover))
    return TrainingReconciler(
        adapters,
        cfg.training,
        models_dir=layout.models_dir,
        journal=ProbeJournal(layout.probe_journal),
        new_document_base_model=cfg.probes.base_model,
        on_committed=on_committed,  # type: ignore[arg-type]
    )
