"""Train a .dlm document's adapter one cycle, as the training reconciler does (it is not on main yet;
once it is, ``learnerd.ml.rows.document_rows`` replaces :func:`document_rows` here): the document's rows,
its ``training`` block, its base model, into the adapter store under its ``dlm_id``."""

from __future__ import annotations

from pathlib import Path

from learnerd.eval.history import adapter_key
from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.cycle import CycleOutcome, train_cycle
from learnerd.ml.hyperparams import training_config_from_mapping
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import ChatRow, Document, read_document, training_rows


def document_rows(document: Document) -> list[TrainingRow]:
    """Every training row of ``document``: Q/A pairs as chat rows (``!probe`` stripped, the frontmatter's
    ``system_prompt`` as their system message), prose as text rows."""
    system = document.frontmatter.system_prompt
    return [
        TrainingRow.chat(r.section_id, r.question, r.answer, system=system)
        if isinstance(r, ChatRow)
        else TrainingRow.plain(r.section_id, r.text)
        for r in training_rows(document)
    ]


async def train_document(store: AdapterStore, path: Path, models_dir: Path) -> CycleOutcome:
    """One training cycle of the document at ``path`` (one torch thread in the training process)."""
    document = read_document(path)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=models_dir, relative_to=path.parent)
    config = training_config_from_mapping(document.frontmatter.raw.get("training"))
    return await train_cycle(store, adapter_key(document), base, document_rows(document), config, num_threads=1)
