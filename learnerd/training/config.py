"""A document's ``training`` block as learnerd trains it: dlm's keys and learnerd's step budget
(:class:`learnerd.store.dlm.TrainingConfig`) with every ingredient's keys (:mod:`learnerd.training.ingredients`).

:func:`training_config` composes the one pydantic model (the same lax reading of YAML 1.1 numbers and the same
``training.KEY must …`` errors for every key), refusing an ingredient key that the block or another ingredient
already has. :func:`check_trainable` refuses what learnerd cannot train; :func:`reference` writes the keys' table
of docs/training-reference.md from the fields' docstrings.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, get_args, get_origin

from pydantic import create_model
from pydantic.fields import FieldInfo

from learnerd.store import dlm
from learnerd.store.dlm.training import DLM_BLOCK_KEYS, field_range
from learnerd.training import ingredients
from learnerd.training.ingredients.spec import Ingredient

TRAINABLE_ADAPTERS = ("lora", "dora")
TRAINABLE_OPTIMIZERS = ("adamw_torch",)


class IngredientClash(ValueError):
    """An ingredient declares a key that the block or another ingredient already has."""


@functools.cache
def compose(registered: tuple[Ingredient, ...]) -> type[dlm.TrainingConfig]:
    """The block's model with the keys of ``registered``, in their order (one class per tuple).

    Raises:
        IngredientClash: naming the ingredient, the key, and whose key it already is.
    """
    owners: dict[str, str] = {key: "dlm's block" for key in (*dlm.TrainingConfig.model_fields, *DLM_BLOCK_KEYS)}
    fields: dict[str, Any] = {}
    for ingredient in registered:
        for key, info in ingredient.options.model_fields.items():
            if key in owners:
                raise IngredientClash(f"training ingredient {ingredient.name!r}: key {key!r} is {owners[key]} already")
            owners[key] = f"ingredient {ingredient.name!r}'s"
            fields[key] = (info.annotation, info)
    return create_model("TrainingConfig", __base__=dlm.TrainingConfig, __module__=__name__, **fields)


def training_config() -> type[dlm.TrainingConfig]:
    """The block's model for :data:`learnerd.training.ingredients.INGREDIENTS` as the tuple is now."""
    return compose(ingredients.INGREDIENTS)


TrainingConfig = training_config()
"""The block's model with the registered ingredients' keys (what :func:`training_config` returns)."""
LEARNERD_KEYS = (TrainingConfig.model_fields.keys() - dlm.TrainingConfig.model_fields.keys()) | dlm.LEARNERD_LOOP_KEYS
"""The keys learnerd adds to dlm's block: the released dlm (0.10.0, ``extra="forbid"``) refuses a document that sets
one (``training.<key>: Extra inputs are not permitted``)."""


def check_trainable(config: dlm.TrainingConfig) -> dlm.TrainingConfig:
    """``config`` read with every ingredient's keys (itself when it already is), if learnerd can train it.

    Accepted but not acted on: ``precision`` (the device picks the dtype) and dlm's non-adapter keys
    (``preference``, ``cpt``, ``adapters``, ``sources``, ...).

    Raises:
        TrainingConfigError: an unknown key (``unknown key(s) in training: lora_rank``), an invalid ingredient
            value, or an ``adapter`` / ``optimizer`` that needs bitsandbytes and a GPU; the message names the key.
    """
    model = training_config()
    if not isinstance(config, model):
        config = model.from_mapping(config.to_dict())
    unknown = config.unknown_keys()
    if unknown:
        raise dlm.TrainingConfigError(f"unknown key(s) in training: {', '.join(unknown)}", key=unknown[0])
    if config.adapter not in TRAINABLE_ADAPTERS:
        raise dlm.TrainingConfigError(
            f"training.adapter {config.adapter!r} needs a GPU; learnerd trains {' or '.join(TRAINABLE_ADAPTERS)}",
            key="adapter",
        )
    if config.optimizer not in TRAINABLE_OPTIMIZERS:
        raise dlm.TrainingConfigError(
            f"training.optimizer {config.optimizer!r} needs a GPU; learnerd trains with "
            f"{' or '.join(TRAINABLE_OPTIMIZERS)}",
            key="optimizer",
        )
    return config


REFERENCE_HEADING = """# The `training` block

Every key of a `.dlm` document's `training` block that learnerd reads, generated from the fields' docstrings
(`learnerd.training.config.reference()`). A key the document leaves out comes from learnerd's recipe for its base
([retention.md](retention.md#the-recipe)), not from the default below. dlm's keys are dlm's names, defaults and
ranges; the released dlm refuses a document that sets one of learnerd's.
"""


def reference() -> str:
    """docs/training-reference.md: a Markdown table of every key of the block (:func:`training_config`), its
    default, its range, whose it is (dlm's, learnerd's loop's or an ingredient's) and its meaning."""
    model = training_config()
    owners = {key: f"`{i.name}`" for i in ingredients.INGREDIENTS for key in i.options.model_fields}
    lines = [REFERENCE_HEADING, "| key | default | range | from | meaning |", "|---|---|---|---|---|"]
    for key, info in model.model_fields.items():
        if key == "extra":
            continue
        owner = owners.get(key) or ("learnerd" if key in dlm.LEARNERD_LOOP_KEYS else "dlm")
        meaning = " ".join((info.description or "").split())
        lines.append(f"| `{key}` | {_shown(info.default)} | {_range(info)} | {owner} | {meaning} |")
    return "\n".join(lines) + "\n"


def _shown(value: Any) -> str:
    """A default as a document writes it (``0.0002``, ``auto``, ``true``, ``none``)."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value is None:
        return "none"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _range(info: FieldInfo) -> str:
    """The bounds of a number field (``1..256``, ``>= 0.0 and <= 0.5``) or the choices of a literal or boolean one."""
    if info.annotation is bool:
        return "`true`, `false`"
    if get_origin(info.annotation) is Literal:
        return ", ".join(f"`{c}`" if c is not None else "none" for c in get_args(info.annotation))
    return field_range(info).removeprefix("in ")
