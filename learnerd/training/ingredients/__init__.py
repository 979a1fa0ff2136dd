"""Training ingredients: what a cycle trains beyond the document's own rows, one module each.

Each module declares its keys of the ``training`` block (``Options``: fields with ranges and docstrings) and its
``rows`` (added to a cycle by the training worker) and/or ``loss`` (a term the step loop adds to every micro-batch),
and ends with ``INGREDIENT`` (the contract: :mod:`~learnerd.training.ingredients.spec`). A new ingredient is one
module and one entry of :data:`INGREDIENTS`; its keys are then read, checked and documented with the block's
(:mod:`learnerd.training.config`).
"""

from __future__ import annotations

from learnerd.training.ingredients import multi_turn, replay, replay_kl, retrieval
from learnerd.training.ingredients.spec import Ingredient

INGREDIENTS: tuple[Ingredient, ...] = (
    multi_turn.INGREDIENT,
    retrieval.INGREDIENT,
    replay.INGREDIENT,
    replay_kl.INGREDIENT,
)
"""The ingredients, in the order their rows follow the document's (which fixes the adapter a seed trains)."""
