"""Reconcilers built from the configuration: the one place that maps settings to constructor arguments.

The daemon's controller table (:data:`learnerd.daemon.app.CONTROLLERS`) and the foreground commands
(``learnerd train``) build their reconcilers here, so a reconciler is composed the same way everywhere.
Reconcilers themselves take explicit arguments, never the whole :class:`~learnerd.config.Config`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from learnerd.config import Config
from learnerd.eval.report import Report
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.serving import ModelCatalog, ServedModel, ServedModels
from learnerd.reconcilers.evaluation import EvaluationReconciler
from learnerd.reconcilers.probes import ProbesReconciler
from learnerd.reconcilers.training import CycleReport, TrainingReconciler
from learnerd.store.adapters import AdapterVersion
from learnerd.store.dlm import DocumentError, read_document
from learnerd.store.probe_journal import ProbeJournal
from learnerd.store.routing import DocumentRouter, DocumentScope

log = structlog.get_logger(__name__)


def document_router(cfg: Config) -> DocumentRouter:
    """Example → document, from ``[probes]`` (relative names under the first docs root)."""
    return DocumentRouter(cfg.probes.document, cfg.probes.by_language, cfg.layout.docs_base)


def probes_reconciler(cfg: Config, router: DocumentRouter | None = None, **hooks: object) -> ProbesReconciler:
    """The probes reconciler of ``cfg`` (``hooks``: its test hooks, ``before_replace`` / ``monotonic``)."""
    return ProbesReconciler(
        router or document_router(cfg),
        db_path=cfg.layout.store_target,
        base_model=cfg.probes.base_model,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
        rewrite_interval_s=cfg.probes.rewrite_interval_s,
        **hooks,  # type: ignore[arg-type]
    )


def evaluation_reconciler(cfg: Config, on_report: Callable[[Path, Report], None] | None = None) -> EvaluationReconciler:
    """The evaluation reconciler of ``cfg`` (``on_report``: its metrics hook)."""
    return EvaluationReconciler(
        cfg.evaluation,
        adapters=adapter_store(cfg),
        models_dir=cfg.layout.models_dir,
        docs_roots=cfg.layout.docs_roots,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
        on_report=on_report,
    )


def served_models(cfg: Config) -> ServedModels:
    """The served-model manager of ``[serve]``: adapters from the store, ``learnerd evolve``'s best deltas
    of a document (``<steering_dir>/runs/<dlm_id>/deltas_best.json``) when ``steering`` is on."""
    return ServedModels(
        adapter_store(cfg),
        cfg.layout.models_dir,
        capacity=cfg.serve.queue_size,
        steering=_best_deltas(cfg.layout.steering_dir / "runs") if cfg.serve.steering else None,
        num_threads=cfg.serve.num_threads,
    )


def _best_deltas(runs: Path) -> Callable[[str, Any], Any]:
    """``(doc_key, tokenizer)`` → the :class:`~learnerd.steering.processor.ClusterBiasProcessor` of the
    document's ``learnerd evolve`` run (``<runs>/<doc_key>/deltas_best.json``), None without one; re-read
    when the file changes. Raises :class:`~learnerd.steering.processor.SteeringError` for a bad file."""
    from learnerd.steering.evolve import BEST_FILE
    from learnerd.steering.processor import load_steering

    cache: dict[Path, tuple[int, Any]] = {}

    def load(doc_key: str, tokenizer: Any) -> Any:
        path = runs / doc_key / BEST_FILE
        try:
            stamp = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if path not in cache or cache[path][0] != stamp:
            cache[path] = (stamp, load_steering(path, tokenizer))
        return cache[path][1]

    return load


def model_catalog(cfg: Config) -> ModelCatalog:
    """The models served: ``[serve] base_models`` (else the ``[probes]`` base) and the documents."""
    return ModelCatalog(cfg.layout.docs_roots, cfg.serve.base_models or [cfg.probes.base_model])


def served_model(doc_path: str | os.PathLike[str]) -> ServedModel | None:
    """The served model of the document at ``doc_path`` (None when it no longer parses)."""
    try:
        fm = read_document(doc_path).frontmatter
    except (DocumentError, OSError):
        return None
    path = Path(doc_path)
    return ServedModel(path.stem, fm.base_model, path.parent, fm.dlm_id, fm.system_prompt)


def training_reconciler(
    cfg: Config,
    on_committed: Callable[[str | os.PathLike[str], AdapterVersion], None] | None = None,
    on_cycle: Callable[[CycleReport], None] | None = None,
) -> TrainingReconciler:
    """The training reconciler of ``cfg``: the adapter store (crash leftovers removed first) and the
    journal of injected probes under the state directory, whose probes may name only documents under
    ``docs_dirs`` or the ``[rpc] document`` (``on_committed``, ``on_cycle``: its hooks).

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
        on_committed=on_committed,  # type: ignore[arg-type]
        on_cycle=on_cycle,
    )
