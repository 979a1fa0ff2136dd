"""Helpers of the steering tests: a Q/A document to evolve deltas on, one torch thread, a steering file over a
three-cluster map. (The adapter they steer is :mod:`tests.support.memorised`'s.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.qa_pairs import QA_PAIRS

# dlm's own keys: the tiny model memorises the 20 answers with these (tests/integration/test_training_lora.py).
TRAINING_BLOCK = {"learning_rate": 1e-2, "num_epochs": 40}
DLM_ID = "01J0STEER0000000000000000A"


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
