"""Per-base training defaults, and the check that a cycle trained enough to have learned anything.

dlm's ``training`` defaults (``learning_rate`` 2e-4, ``num_epochs`` 3) suit a pretrained model with a few hundred
rows; on a handful of Q/A pairs they train a dozen steps. learnerd fills the keys a document leaves out from a
recipe chosen by its base model (the document's own keys always win; docs/retention.md, "The recipe"):

* :data:`RANDOM_BASE_RECIPE` for the built-in random tiny models: memorisation (LoRA r 16 without dropout,
  ``learning_rate`` 1e-2, micro-batch 4, 60 epochs);
* :data:`PRETRAINED_RECIPE` for every other base: LoRA r 8 (alpha 16) on every linear projection,
  ``learning_rate`` 1e-3, micro-batch 4, 2 epochs and at least :data:`MIN_STEPS` steps, 40 conversations of the
  document's pairs (at most one per pair), micro-batches of rows of similar length, and (the daemon serves
  retrieved examples: ``[serve] rag_k``, 3 by default) each pair trained once more under as many retrieved
  examples, its own among them (:func:`learnerd.training.ingredients.retrieval.served`: RAFT's rows) and the
  conversations under the examples retrieved for their last question, as the endpoint quotes a dialogue's. No general
  replay and no KL term: the endpoint routes what the document does not hold to the base
  (:mod:`learnerd.ml.router`), and the promotion gate judges retention as served. Both stay keys
  (``general_replay``, ``replay_kl_weight``) for a document served ``always-adapter``.

:func:`document_training` resolves a document's block over the recipe and remembers which values are the
document's own (:class:`DocumentTraining`), so :func:`undertrained_reason` blames only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from learnerd.ml.base_model import BUILTIN_BASE_MODELS
from learnerd.ml.undertrained import GENERAL_FIX, MIN_STEPS, undertrained_finding
from learnerd.store.dlm import TrainingConfig
from learnerd.training.config import LEARNERD_KEYS, training_config
from learnerd.training.ingredients import retrieval

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
    "num_epochs": 2,
    "general_replay": 0.0,
    "replay_kl_weight": 0.0,
    "multi_turn_rows": 40,
    "group_by_length": True,
    "min_steps": MIN_STEPS,
}
STEP_KEYS = ("num_epochs", "max_steps", "min_steps", "micro_batch_size", "grad_accum")
"""The ``training`` keys that decide how many optimizer steps a cycle takes over its rows."""


@dataclass(frozen=True)
class DocumentTraining:
    """A document's training: ``config``, its ``training`` block over the recipe of its base (``builtin``:
    a built-in random model), and ``own_keys``, the fields whose value is the document's — those its block
    sets to something other than the recipe's value (a key that repeats the recipe is learnerd's)."""

    config: TrainingConfig
    builtin: bool
    own_keys: frozenset[str]
    served_rag_k: int = 0

    def recipe(self) -> TrainingConfig:
        """What learnerd's recipe alone gives for this base (and the served ``rag_k``)."""
        return training_config().from_mapping(recipe_for(self.builtin, self.served_rag_k))


def recipe_for(builtin: bool, served_rag_k: int = 0) -> dict[str, Any]:
    """The default ``training`` keys for a built-in random base (``builtin``) or a pretrained one (a copy), with
    :func:`learnerd.training.ingredients.retrieval.served`'s keys for ``served_rag_k`` (``[serve] rag_k``; 0: off),
    so the adapter learns to answer under the block of retrieved examples it is served with, and its
    ``multi_turn_rows`` conversations as ``retrieval_multi_turn`` ones, each under the examples retrieved for its last
    question as the endpoint quotes a dialogue's (at full size their dialogues passed the gate where plain ones did
    not: docs/benchmarks.md, "The dialogue gate at full size"); a built-in random base trains without them (it
    answers bytes, under a block or not: its quick start stays a fast check)."""
    if builtin:
        return dict(RANDOM_BASE_RECIPE)
    recipe = {**PRETRAINED_RECIPE, **retrieval.served(served_rag_k)}
    if served_rag_k > 0:  # the conversations quoted as the endpoint quotes a dialogue's last turn, not plain
        recipe["retrieval_multi_turn"], recipe["multi_turn_rows"] = recipe["multi_turn_rows"], 0
    return recipe


def default_training(base_model: str) -> dict[str, Any]:
    """The explicit ``training`` block learnerd writes into a document it creates for ``base_model``: the
    recipe's keys that dlm knows, so the released dlm trains the document as learnerd does and still loads it
    (it refuses learnerd's own keys, :data:`~learnerd.training.config.LEARNERD_KEYS`). learnerd fills those from the
    recipe all the same (:func:`document_training`: a key the block leaves out is the recipe's)."""
    recipe = recipe_for(base_model.strip() in BUILTIN_BASE_MODELS)
    return {k: v for k, v in recipe.items() if k not in LEARNERD_KEYS}


def document_training(raw_block: Mapping[str, Any] | None, *, builtin: bool, served_rag_k: int = 0) -> DocumentTraining:
    """The document's ``training`` block over :func:`recipe_for`'s defaults, and which values are its own. A block
    that turns ``retrieval_k`` off and sets neither ``multi_turn_rows`` nor ``retrieval_multi_turn`` gets the plain
    conversations of a daemon that quotes nothing (quoted ones need retrieval rows).

    Args:
        raw_block: the block as written in the frontmatter (None or empty: all defaults).
        builtin: the base is one of learnerd's built-in random models.
        served_rag_k: ``[serve] rag_k`` (0: off), as :func:`recipe_for` takes it.

    Raises:
        TrainingConfigError: a value of the block is invalid (as :meth:`TrainingConfig.from_mapping`).
    """
    block = dict(raw_block or {})
    recipe = recipe_for(builtin, served_rag_k)
    model = training_config()
    config = model.from_mapping({**recipe, **block})
    if not retrieval.Options.of(config).retrieval_k and not block.keys() & {"multi_turn_rows", "retrieval_multi_turn"}:
        # the document turned retrieval rows off: its conversations are the plain ones, as if nothing were quoted
        config = model.from_mapping({**recipe_for(builtin), **block})
    default = model.from_mapping(recipe)
    fields = model.model_fields.keys() - {"extra"}
    own = frozenset(k for k in block if k in fields and getattr(config, k) != getattr(default, k))
    return DocumentTraining(config, builtin, own, served_rag_k)


def undertrained_reason(
    steps: int, final_loss: float, vocab_size: int | None, *, training: DocumentTraining | None = None, rows: int = 0
) -> str | None:
    """:func:`learnerd.ml.undertrained.undertrained_finding` of a cycle: with its ``training`` and the number of
    ``rows`` it trained on, the fix names the document's own keys to delete; without them it is the general advice
    (more epochs or more rows)."""
    if training is None or rows <= 0:
        return undertrained_finding(steps, final_loss, vocab_size)
    return undertrained_finding(
        steps, final_loss, vocab_size, lambda few, high: _remedy(training, rows, few=few, high=high)
    )


def _remedy(training: DocumentTraining, rows: int, *, few: bool, high: bool) -> str:
    """``cause: ...; fix: ...`` for :func:`undertrained_reason`: blame only the document's own keys (learnerd's
    pretrained recipe trains at least :data:`MIN_STEPS` steps, ``min_steps``, so too few steps are a document's own
    keys' doing)."""
    config, recipe = training.config, training.recipe()
    blamed = [k for k in STEP_KEYS if few and k in training.own_keys]
    if high and "learning_rate" in training.own_keys:
        blamed.append("learning_rate")
    if blamed:
        listing = ", ".join(f"{k}: {_value(getattr(config, k))}" for k in blamed)
        them = "it" if len(blamed) == 1 else "them"
        after = config.model_copy(update={k: getattr(recipe, k) for k in blamed}).total_steps(rows)
        fix = f"delete {them} to use learnerd's recipe for this base ({after} steps over {rows} rows)"
        return f"cause: the document's training block sets {listing}; fix: {fix}"
    if high:
        return (
            f"cause: learnerd's default learning_rate {_value(config.learning_rate)} did not fit these rows; fix: "
            "set training.learning_rate in the document (lower if the loss rose during training, higher if it stayed "
            "flat)"
        )
    return GENERAL_FIX


def _value(value: Any) -> str:
    """A training value as the document would write it (``0.0002``, ``auto``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)
