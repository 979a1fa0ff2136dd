"""Train a .dlm document's adapter one cycle, as the training reconciler does, without a daemon: the
document's rows, its ``training`` block, its base model, into the adapter store under its ``dlm_id`` — and
promote it, as a promotion gate that passes would (tests of the gate itself use the reconcilers)."""

from __future__ import annotations

from pathlib import Path

from learnerd.eval.history import adapter_key
from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.rows import document_rows
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.training.config import check_trainable
from learnerd.training.cycle import CycleOutcome, train_cycle


async def train_document(store: AdapterStore, path: Path, models_dir: Path, embedder=None) -> CycleOutcome:
    """One training cycle of the document at ``path`` (one torch thread in the training process), its
    version promoted; with ``embedder``, its routing threshold calibrated (:func:`learnerd.ml.router.calibrate`)."""
    document = read_document(path)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=models_dir, relative_to=path.parent)
    config = check_trainable(document.frontmatter.training)
    rows = document_rows(document)
    outcome = await train_cycle(
        store, adapter_key(document), base, rows, config, num_threads=1, routing_embedder=embedder
    )
    if outcome.version is not None:
        store.promote(outcome.version)
    return outcome
