"""The contract of a training ingredient: the keys it adds to a document's ``training`` block, the rows it adds to
a cycle and the loss term it adds to a step (either or both).

An ingredient module declares ``Options`` (a subclass of :class:`Options`: one field per key, its range in
``Field(…)``, its meaning as the docstring below it, a default that turns the ingredient off) and ends with
``INGREDIENT = Ingredient("<name>", Options, rows=…, loss=…)``; the tuple ``INGREDIENTS`` of
:mod:`learnerd.training.ingredients` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Self

from pydantic import BaseModel, ConfigDict

from learnerd.ml.rows import EncodedRow, TrainingRow, system_prompt
from learnerd.store.dlm import TrainingConfig


class Options(BaseModel):
    """An ingredient's keys of the ``training`` block (validated as the block's own: lax numbers, no nan/inf)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    @classmethod
    def of(cls, config: TrainingConfig) -> Self:
        """This ingredient's values in ``config``, a block read with every ingredient's keys
        (:func:`learnerd.training.config.training_config`).

        Raises:
            AttributeError: ``config`` lacks one of the keys (a block read without the ingredients').
        """
        return cls.model_validate({key: getattr(config, key) for key in cls.model_fields})


@dataclass(frozen=True)
class CycleRows:
    """What an ingredient's rows are made from: the cycle's document rows trained every epoch (``rows``) and those
    rehearsed (``rehearsal``, ``rehearsed_per_epoch`` of them an epoch: 0 when there are none), the block's
    ``seed``, the base ``model`` and its ``tokenizer`` (no adapter attached yet), where the base's general
    replay answers are cached (``replay_cache``; None: not cached), and ``on_answers(done, total)``, to call as the
    base's answers an ingredient generates come (the training process reports them as its ``base answers`` phase;
    None: not reported)."""

    rows: tuple[TrainingRow, ...]
    rehearsal: tuple[TrainingRow, ...]
    rehearsed_per_epoch: int
    seed: int
    model: Any
    tokenizer: Any
    replay_cache: Path | None = None
    on_answers: Callable[[int, int], None] | None = None

    @property
    def pairs(self) -> tuple[TrainingRow, ...]:
        """Every document row of the cycle, trained or rehearsed."""
        return (*self.rows, *self.rehearsal)

    @property
    def system(self) -> str | None:
        """The document's system prompt (:func:`learnerd.ml.rows.system_prompt`), or None."""
        return system_prompt(self.pairs)


class Rows(NamedTuple):
    """An ingredient's rows: those every epoch trains, and those rehearsed with the document's rehearsed rows."""

    every_epoch: Sequence[TrainingRow]
    rehearsal: Sequence[TrainingRow] = ()


@dataclass(frozen=True)
class Batch:
    """One micro-batch of a step, as the step loop collated it: the peft ``model``, the encoded ``rows``,
    ``input_ids`` / ``attention_mask`` / ``labels`` (``(rows, length)`` int64, right-padded) and the adapted
    model's ``logits`` at the loss-carrying positions (``(positions, vocab)``, with gradient, in the row-major order
    of ``labels[:, 1:] != IGNORE_INDEX``, the labels they predict: :mod:`learnerd.training.loss`)."""

    model: Any
    rows: tuple[EncodedRow, ...]
    input_ids: Any
    attention_mask: Any
    labels: Any
    logits: Any


RowsFn = Callable[[Any, CycleRows], Rows]
"""``rows(options, cycle)``: the rows the ingredient adds to a cycle (none when its options turn it off)."""
LossFn = Callable[[Any, Batch], Any]
"""``loss(options, batch)``: a 0-d tensor in nats summed over the batch's tokens, which the step loop divides by
the step's loss-carrying tokens (as the cross-entropy) and adds to the loss; None: no term for this batch."""


@dataclass(frozen=True)
class Ingredient:
    """A training ingredient: its ``name``, its ``options`` (the keys it adds), and its ``rows`` and/or ``loss``."""

    name: str
    options: type[Options]
    rows: RowsFn | None = None
    loss: LossFn | None = None
