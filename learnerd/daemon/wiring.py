"""The served models built from the configuration: ``[serve]`` → :class:`~learnerd.ml.serving.ServedModels`,
the catalog of models the endpoint lists, and a document's served model.

(Reconcilers are built from their own specs: each reconciler module's ``SPEC`` and its ``*_reconciler(cfg)``
factory, :mod:`learnerd.reconcilers.spec`.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from learnerd.daemon.config import Config
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.llamacpp_serving import LlamaCppServedModels
from learnerd.ml.serving import ModelCatalog, ServedModel, ServedModels
from learnerd.store.dlm import DocumentError, read_document

log = structlog.get_logger(__name__)


def served_models(cfg: Config) -> ServedModels:
    """The served-model manager of ``[serve]``: adapters from the store; with ``backend = "llamacpp"``,
    :class:`~learnerd.ml.llamacpp_serving.LlamaCppServedModels`, else the transformers one; either applies
    ``learnerd evolve``'s best deltas of a document (``<steering_dir>/runs/<dlm_id>/deltas_best.json``) when
    ``steering`` is on (llama.cpp: as a logit bias)."""
    manager = LlamaCppServedModels if cfg.serve.backend == "llamacpp" else ServedModels
    return manager(
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
    """The models served: ``[serve] base_models``, the documents' bases and the documents."""
    return ModelCatalog(cfg.layout.docs_roots, cfg.serve.base_models)


def served_model(doc_path: str | os.PathLike[str]) -> ServedModel | None:
    """The served model of the document at ``doc_path`` (None when it no longer parses)."""
    try:
        fm = read_document(Path(doc_path)).frontmatter
    except (DocumentError, OSError):
        return None
    path = Path(doc_path)
    return ServedModel(path.stem, fm.base_model, path.parent, fm.dlm_id, fm.system_prompt)
