"""Per-base training defaults, and the check that a cycle trained enough to have learned anything.

dlm's ``training`` defaults (``learning_rate`` 2e-4, ``num_epochs`` 3) suit a pretrained model with a
few hundred rows; on a handful of Q/A pairs they train a dozen steps. learnerd fills the keys a
document leaves out from a recipe chosen by its base model (the document's own keys always win):

* :data:`RANDOM_BASE_RECIPE` for the built-in random tiny models: memorisation — LoRA r = 16 without
  dropout, ``learning_rate`` 1e-2, micro-batch 4, 60 epochs. On the 20 pairs of the shipped example logs
  (360 steps) it answers 19/20 probes exactly, where dlm's lr 1e-2 / 40 epochs at micro-batch 8 answers
  6/20 and at micro-batch 4 15/20, and lr 2e-2 diverges (``tests/e2e/test_run_once_trains.py``);
* :data:`PRETRAINED_RECIPE` for every other base: LoRA r = 8 on every linear projection (attention and
  MLP), ``learning_rate`` 1e-3, micro-batch 4, 12 epochs (20 pairs → 60 steps), which takes
  SmolLM2-135M-Instruct from 0/20 to 20/20 exact greedy recall on tldr pairs
  (``benchmarks/bench_learning.py``).

:func:`undertrained_reason` is the check behind the ``undertrained`` warning and report finding: fewer
than :data:`MIN_STEPS` optimizer steps, or a final loss above ln(vocabulary size) nats/token — worse than
a uniform guess over the vocabulary, so the adapter cannot have learned its rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from learnerd.ml.base_model import BUILTIN_BASE_MODELS
from learnerd.store.dlm import TrainingConfig

RANDOM_BASE_RECIPE: dict[str, Any] = {
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "learning_rate": 1e-2,
    "micro_batch_size": 4,
    "num_epochs": 60,
}
PRETRAINED_RECIPE: dict[str, Any] = {
    "lora_r": 8,
    "lora_alpha": 16,
    "target_modules": "auto",
    "learning_rate": 1e-3,
    "micro_batch_size": 4,
    "num_epochs": 12,
}
MIN_STEPS = 50
UNDERTRAINED = "undertrained"
"""The prefix of the report finding (sway reports findings as one-line strings)."""


def recipe_for(builtin: bool) -> dict[str, Any]:
    """The default ``training`` keys for a built-in random base (``builtin``) or a pretrained one (a copy)."""
    return dict(RANDOM_BASE_RECIPE if builtin else PRETRAINED_RECIPE)


def default_training(base_model: str) -> dict[str, Any]:
    """The explicit ``training`` block learnerd writes into a document it creates for ``base_model``."""
    return recipe_for(base_model.strip() in BUILTIN_BASE_MODELS)


def training_config(raw_block: Mapping[str, Any] | None, *, builtin: bool) -> TrainingConfig:
    """The document's ``training`` block over :func:`recipe_for`'s defaults.

    Args:
        raw_block: the block as written in the frontmatter (None or empty: all defaults).
        builtin: the base is one of learnerd's built-in random models.

    Raises:
        TrainingConfigError: a value of the block is invalid (as :meth:`TrainingConfig.from_mapping`).
    """
    return TrainingConfig.from_mapping({**recipe_for(builtin), **dict(raw_block or {})})


def undertrained_reason(steps: int, final_loss: float, vocab_size: int | None) -> str | None:
    """A one-line ``undertrained: ...`` finding when a cycle trained fewer than :data:`MIN_STEPS` steps or
    ended above the uniform-guess loss ln(``vocab_size``) nats/token; None when neither holds.

    ``vocab_size`` None or 0 (unknown) skips the loss check.
    """
    reasons = []
    if steps < MIN_STEPS:
        reasons.append(f"{steps} optimizer steps (< {MIN_STEPS})")
    if vocab_size and final_loss > math.log(vocab_size):
        uniform = math.log(vocab_size)
        reasons.append(f"final loss {final_loss:.3f} nats/token above a uniform guess ln({vocab_size}) = {uniform:.3f}")
    if not reasons:
        return None
    return (
        f"{UNDERTRAINED}: {' and '.join(reasons)}; raise training.num_epochs or learning_rate "
        "(or leave them out for learnerd's per-base defaults)"
    )
