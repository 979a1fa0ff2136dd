"""The ``training`` block of a .dlm document: dlm's keys, and learnerd's step budget and batching.

Field names, defaults and ranges are dlm's (``src/dlm/doc/schema.py``, ``TrainingConfig``, schema v15), each
field's meaning the docstring below it; learnerd bounds what dlm leaves open (``lora_alpha``, ``num_epochs``,
``seed``), so a hostile or mistyped document cannot hold the one training worker for days. learnerd's training
ingredients add their own keys to this model (:mod:`learnerd.training.config`, which cannot be imported here).

The block is a pydantic model in lax mode (but booleans are no numbers, and nan and inf are refused), which
matters for YAML 1.1: PyYAML reads ``learning_rate: 2e-4`` (no dot) as the *string* ``"2e-4"``. Keys dlm knows
but that are not single-adapter fields (:data:`DLM_BLOCK_KEYS`) and keys nobody knows are kept, unvalidated, in
:attr:`TrainingConfig.extra`, so a document written by a newer dlm still parses; :meth:`TrainingConfig.unknown_keys`
names the ones dlm would refuse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

AUTO_MICRO_BATCH_SIZE = 8
"""Rows per forward pass when ``micro_batch_size`` is ``"auto"`` (dlm asks its hardware doctor)."""

DLM_BLOCK_KEYS = frozenset({"preference", "cpt", "gate", "cache", "audio", "adapters", "sources", "sources_policy"})
"""Keys of dlm's training block that are not single-adapter fields: kept in ``extra``, not acted on."""
LEARNERD_LOOP_KEYS = frozenset({"max_steps", "min_steps", "group_by_length"})
"""The fields of this model that learnerd adds to dlm's block (the ingredients add more: the released dlm refuses
a document that sets any of them)."""


class TrainingConfigError(ValueError):
    """A value of the ``training`` block of the wrong type or out of range; ``key`` names the field."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


_NUMBERS = (int, float, int | None)
"""The annotations of number fields: a boolean is refused there, not read as 0 or 1."""


class TrainingConfig(BaseModel):
    """One document's training hyperparameters, validated (and coerced) on construction.

    See the module docstring for the fields, their units and their source. ``extra`` holds every other
    key of the block, unvalidated.

    Raises:
        TrainingConfigError: a field is of the wrong type or out of range (the message names the key,
            e.g. ``training.lora_r must be in 1..256, not 0``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    adapter: Literal["lora", "qlora", "dora"] = "lora"
    """the adapter kind; qlora needs bitsandbytes and a GPU, which learnerd's trainer refuses"""
    lora_r: int = Field(8, ge=1, le=256)
    """LoRA rank"""
    lora_alpha: int = Field(16, ge=1, le=1024)
    """LoRA scale numerator: the update is scaled by lora_alpha / lora_r"""
    lora_dropout: float = Field(0.05, ge=0.0, le=0.5)
    """dropout on the adapted layers' inputs while training"""
    target_modules: str | tuple[str, ...] = "auto"
    """the layers adapted: auto (every linear layer but the output head, peft's all-linear) or a list of module
    names"""
    sequence_len: int = Field(2048, ge=64, le=32768)
    """tokens a row is cut to (the model's max_position_embeddings when that is shorter)"""
    micro_batch_size: str | int = "auto"
    """rows per forward pass: auto (8) or an integer >= 1"""
    grad_accum: str | int = "auto"
    """micro-batches per optimizer step: auto (1) or an integer >= 1"""
    learning_rate: float = Field(2e-4, gt=0.0)
    """AdamW's peak learning rate"""
    num_epochs: int = Field(3, ge=1, le=1000)
    """passes over the rows a cycle trains (unless max_steps is set)"""
    optimizer: Literal["adamw_torch", "adamw_bnb_8bit", "paged_adamw_8bit", "galore_adamw", "galore_adamw_8bit"] = (
        "adamw_torch"
    )
    """the optimizer; all but adamw_torch need bitsandbytes or GaLore and a GPU, which learnerd's trainer refuses"""
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    """the learning rate's schedule after the warm-up (transformers' get_scheduler)"""
    warmup_ratio: float = Field(0.1, ge=0.0, le=0.5)
    """the fraction of a cycle's optimizer steps that warm the learning rate up"""
    precision: Literal[None, "bf16", "fp16", "fp32"] = None
    """accepted, not acted on: the device picks the dtype (float32 on CPU, bfloat16 on CUDA where supported)"""
    seed: int = Field(42, ge=0, le=2**32 - 1)
    """seeds the adapter's initial weights, the dropout masks, the row order and every ingredient's draws"""
    max_steps: int | None = Field(None, ge=1, le=1_000_000)
    """optimizer steps per cycle, replacing num_epochs (none: num_epochs decides); a budget that ends
    within the first epoch trains, and tokenises, a seeded sample of the rows it reaches"""
    min_steps: int = Field(0, ge=0, le=1_000_000)
    """optimizer steps per cycle at least when num_epochs decides: a small document's rows trained for more
    epochs, the last one partly (0: none)"""
    group_by_length: bool = Field(False, strict=True)
    """micro-batches of rows of similar length (the transformers Trainer's group_by_length): the same
    rows and steps, less padding computed"""
    extra: dict[str, Any] = Field(default_factory=dict)
    """every other key of the block, unvalidated"""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _training_error(exc, type(self)) from None

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name and cls.model_fields[info.field_name].annotation in _NUMBERS:
            raise ValueError(f"must be a number, not {value!r}")
        return value

    @field_validator("target_modules", mode="before")
    @classmethod
    def _auto_or_module_names(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, list | tuple) and value and all(isinstance(m, str) and m for m in value):
            return tuple(value)
        raise ValueError(f"must be 'auto' or a non-empty list of module names, not {value!r}")

    @field_validator("micro_batch_size", "grad_accum", mode="before")
    @classmethod
    def _auto_or_positive_int(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if not isinstance(value, bool):
            try:
                number = int(value) if isinstance(value, int | str) else value
            except ValueError:
                number = None
            if isinstance(number, float) and number.is_integer():
                number = int(number)
            if isinstance(number, int) and number >= 1:
                return number
        raise ValueError(f"must be 'auto' or an integer >= 1, not {value!r}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> TrainingConfig:
        """The config of a parsed ``training`` block (None: all defaults); other keys go to ``extra``.

        Raises:
            TrainingConfigError: ``raw`` is not a mapping, or a field is invalid.
        """
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TrainingConfigError(f"training must be a mapping, not {type(raw).__name__}")
        fields = cls.model_fields.keys() - {"extra"}
        known = {k: v for k, v in raw.items() if k in fields}
        return cls(**known, extra={k: v for k, v in raw.items() if k not in fields})

    def unknown_keys(self) -> tuple[str, ...]:
        """Keys of ``extra`` that dlm does not know either (most likely typos), sorted."""
        return tuple(sorted(str(k) for k in self.extra if k not in DLM_BLOCK_KEYS))

    def batch_size(self) -> int:
        """Rows per forward pass (``micro_batch_size``; ``auto`` → :data:`AUTO_MICRO_BATCH_SIZE`)."""
        return AUTO_MICRO_BATCH_SIZE if self.micro_batch_size == "auto" else int(self.micro_batch_size)

    def accumulation(self) -> int:
        """Micro-batches per optimizer step (``grad_accum``; ``auto`` → 1)."""
        return 1 if self.grad_accum == "auto" else int(self.grad_accum)

    def total_steps(self, num_rows: int) -> int:
        """Optimizer steps for one cycle over ``num_rows`` rows: ``max_steps`` when set, else
        ``num_epochs × ceil(num_rows / (batch_size × accumulation))``, at least ``min_steps``; 0 for no rows."""
        if num_rows <= 0:
            return 0
        if self.max_steps is not None:
            return self.max_steps
        return max(self.min_steps, self.num_epochs * math.ceil(num_rows / (self.batch_size() * self.accumulation())))

    def peft_target_modules(self) -> str | list[str]:
        """``target_modules`` as peft's ``LoraConfig`` takes it (``"auto"`` → ``"all-linear"``)."""
        return "all-linear" if self.target_modules == "auto" else list(self.target_modules)

    def lora_shape(self) -> dict[str, Any]:
        """The fields that fix the adapter's shape; an adapter can only be resumed when these match."""
        return {
            "adapter": self.adapter,
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "target_modules": self.target_modules if self.target_modules == "auto" else list(self.target_modules),
        }

    def to_dict(self) -> dict[str, Any]:
        """The block as a JSON-ready mapping (``extra`` keys at the top level, ``target_modules`` as a
        list); :meth:`from_mapping` reads it back to an equal config."""
        out = self.model_dump(exclude={"extra"})
        if isinstance(self.target_modules, tuple):
            out["target_modules"] = list(self.target_modules)
        return {**out, **self.extra}


def field_range(info: FieldInfo) -> str:
    """``"in 1..256"`` (an integer field) or ``">= 0.0 and <= 0.5"`` (a number) from a field's bounds; empty
    when it has none."""
    low = high = None
    for bound in info.metadata:
        if isinstance(bound, Ge | Gt):
            low = (">=" if isinstance(bound, Ge) else ">", bound.ge if isinstance(bound, Ge) else bound.gt)
        elif isinstance(bound, Le | Lt):
            high = ("<=" if isinstance(bound, Le) else "<", bound.le if isinstance(bound, Le) else bound.lt)
    if info.annotation in (int, int | None) and (low is None or low[0] == ">=") and (high is None or high[0] == "<="):
        return f"in {low[1] if low else '-inf'}..{high[1] if high else 'inf'}"
    parts = [f"{bound[0]} {bound[1]}" for bound in (low, high) if bound]
    return " and ".join(parts)


def _training_error(exc: ValidationError, model: type[TrainingConfig]) -> TrainingConfigError:
    """The first error of ``exc`` (raised by ``model``) as ``training.KEY must …, not VALUE`` (the form learnerd has
    always used)."""
    error = exc.errors(include_url=False)[0]
    key = str(error["loc"][0]) if error["loc"] else None
    kind, value = error["type"], error.get("input")
    if kind == "value_error":
        text = str(error["ctx"]["error"])
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        text = f"must be {field_range(model.model_fields[str(key)])}, not {value}"
    elif kind == "finite_number":
        text = f"must be a finite number, not {value!r}"
    elif kind.startswith("int_"):
        text = f"must be an integer, not {value!r}"
    elif kind.startswith("float_"):
        text = f"must be a number, not {value!r}"
    elif kind == "literal_error":
        text = f"must be one of {error['ctx']['expected']}, not {value!r}"
    elif kind == "extra_forbidden":
        text = "is not a field (from_mapping keeps other keys in extra)"
    else:
        text = f"{error['msg'].lower()}, not {value!r}"
    return TrainingConfigError(f"training.{key} {text}" if key else f"training: {text}", key=key)
