"""A state directory holding a Q/A document and the adapter the tiny model learned it with: what the
steering tests evolve deltas on. Trained once per machine into the artefact cache
(:mod:`tests.support.artefact_cache`; training takes a while on a small machine): read it, copy it to change it."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.qa_pairs import QA_PAIRS
from tests.support.artefact_cache import cached, content_key, learnerd_code, versions
from tests.support.base_models import LIBRARIES

# dlm's own keys: the tiny model memorises the 20 answers with these (tests/integration/test_training_lora.py).
TRAINING_BLOCK = {"learning_rate": 1e-2, "num_epochs": 40}
DLM_ID = "01J0STEER0000000000000000A"


@dataclass(frozen=True)
class TrainedDocument:
    """``state_dir`` with ``models/`` (the built-in tiny model) and ``adapters/<DLM_ID>/`` (v0001),
    and ``doc``: the document, every pair a ``### Q !probe``."""

    state_dir: Path
    doc: Path
    doc_key: str


def document_text(pairs=QA_PAIRS) -> str:
    body = "".join(f"### Q !probe\n{q}\n### A\n{a}\n" for q, a in pairs)
    return (
        "---\n"
        f"dlm_id: {DLM_ID}\n"
        "dlm_version: 15\n"
        "base_model: learnerd/tiny-llama\n"
        "training:\n"
        f"  learning_rate: {TRAINING_BLOCK['learning_rate']}\n"
        f"  num_epochs: {TRAINING_BLOCK['num_epochs']}\n"
        "---\n"
        f"::instruction::\n{body}"
    )


def trained_document() -> TrainedDocument:
    """The document trained into ``state/`` (promoted v0001), from the artefact cache: keyed by learnerd's code,
    the document and the libraries' versions."""
    key = content_key("steering document", document_text(), learnerd_code(), versions(*LIBRARIES))
    root = cached("steering-trained", key, _train)
    return TrainedDocument(state_dir=root / "state", doc=root / "docs" / "qa.dlm", doc_key=DLM_ID)


def _train(root: Path) -> None:
    """Write the document under ``root/docs`` and train its adapter into ``root/state`` on one torch thread."""
    from learnerd.ml.base_model import resolve_base_model
    from learnerd.ml.rows import document_rows
    from learnerd.store.adapters import AdapterStore
    from learnerd.store.dlm import read_document
    from learnerd.training.config import check_trainable
    from learnerd.training.cycle import train_cycle

    state = root / "state"
    doc = root / "docs" / "qa.dlm"
    doc.parent.mkdir(parents=True)
    doc.write_text(document_text(), encoding="utf-8")
    document = read_document(doc)
    rows = document_rows(document)
    config = check_trainable(document.frontmatter.training)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=state / "models")
    store = AdapterStore(state / "adapters")
    with one_thread():
        outcome = anyio.run(functools.partial(train_cycle, store, DLM_ID, base, rows, config, num_threads=1))
    assert outcome.version is not None and outcome.version.name == "v0001"
    store.promote(outcome.version)  # as a promotion gate that passes would


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block (the ``one_torch_thread`` fixture, for wider-scoped fixtures)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def write_eos_split_deltas(run: Path, tokenizer, eos: tuple[int, ...], deltas: dict[int, float]) -> Path:
    """``<run>/deltas_best.json`` over a three-cluster map of ``tokenizer``'s vocabulary (saved beside it):
    0 the ``eos`` ids, 1 (numbers) empty, 2 every other token; returns the steering file's path."""
    import numpy as np

    from learnerd.steering.clusters import VocabularyClusters, save_clusters, tokenizer_identity
    from learnerd.steering.evolve import BEST_FILE
    from learnerd.steering.processor import write_steering

    token_clusters = np.full(len(tokenizer), 2, dtype=np.int32)
    token_clusters[list(eos)] = 0
    clusters = VocabularyClusters(token_clusters, 1, tokenizer_identity(tokenizer), "none", 0, 1, eos, {})
    write_steering(run / BEST_FILE, deltas, save_clusters(clusters, run))
    return run / BEST_FILE
