"""The ``training`` block of a .dlm document's frontmatter: learnerd's one definition of its fields.

Field names, defaults and ranges are dlm's (``src/dlm/doc/schema.py``, ``TrainingConfig``, schema v15):
LoRA rank ``lora_r`` 8 (1..256), ``lora_alpha`` 16, ``lora_dropout`` 0.05 (0..0.5), ``learning_rate``
2e-4 (> 0), ``sequence_len`` 2048 tokens (64..32768), ``num_epochs`` 3, a ``cosine`` schedule with
``warmup_ratio`` 0.1 (0..0.5, a fraction of the optimizer steps), ``seed`` 42, ``target_modules``
``"auto"`` (every linear layer but the output head: peft's ``"all-linear"``), ``micro_batch_size`` and
``grad_accum`` ``"auto"`` (8 rows and 1 micro-batch per step on learnerd, which trains on CPU).

learnerd adds keys dlm does not have: ``max_steps``, a budget of optimizer steps per training cycle
that replaces ``num_epochs`` when set (``None`` by default); ``retrieval_k`` (0..16, examples quoted in each
retrieval-augmented row: every Q/A pair trained once more under the block of retrieved examples the endpoint
serves, ``learnerd.ml.retrieved_examples``; 0, off, by default); and three that keep the base's abilities
(``learnerd.training.ingredients.replay``, docs/retention.md), all off by default here (the per-base recipe of
``learnerd.training.recipes`` may turn them on): ``general_replay`` (0..10, replay rows per document row: the
base's own cached greedy answers to a general prompt pool), ``replay_kl_weight`` (0..100, the weight of a
KL(base ‖ adapted) term on the replay rows' answer tokens) and ``multi_turn_rows`` (0..10,000
conversations chaining several of the document's Q/A pairs). ``group_by_length`` (a boolean, off by default) batches
rows of similar length together, as the transformers Trainer's ``group_by_length`` does: the same rows and
steps, less padding computed (``learnerd.training.lora``).

learnerd bounds what dlm leaves open, so a hostile or mistyped document cannot hold the one training worker
for days or commit a garbage adapter: ``lora_alpha`` 1..1024 (at most 4 × the largest rank), ``num_epochs``
1..1000, ``max_steps`` 1..1,000,000, ``seed`` 0..2³²−1 (numpy's and the data loader's seed range).

The block is a pydantic model in lax mode (but booleans are no numbers, and nan and inf are refused), which
matters for YAML 1.1: PyYAML reads ``learning_rate: 2e-4`` (no dot) as the *string* ``"2e-4"``. Keys dlm knows
but that are not single-adapter fields (``preference``, ``cpt``, ``adapters``, ``sources``, ...:
:data:`DLM_BLOCK_KEYS`) and keys nobody knows are kept, unvalidated, in :attr:`TrainingConfig.extra`, so a
document written by a newer dlm still parses; :meth:`TrainingConfig.unknown_keys` names the ones dlm would
refuse, and learnerd's trainer (``learnerd.training.config.check_trainable``) refuses them too, so a typo never
trains silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

AUTO_MICRO_BATCH_SIZE = 8
"""Rows per forward pass when ``micro_batch_size`` is ``"auto"`` (dlm asks its hardware doctor)."""

MAX_RETRIEVAL_K = 16
"""``retrieval_k``'s upper bound (examples quoted per retrieval-augmented row)."""
DLM_BLOCK_KEYS = frozenset({"preference", "cpt", "gate", "cache", "audio", "adapters", "sources", "sources_policy"})
"""Keys of dlm's training block that are not single-adapter fields: kept in ``extra``, not acted on."""
LEARNERD_KEYS = frozenset(
    {"max_steps", "retrieval_k", "general_replay", "replay_kl_weight", "multi_turn_rows", "group_by_length"}
)
"""The fields learnerd adds to dlm's block: the released dlm (0.10.0, ``extra="forbid"``) refuses a document
that sets one (``training.<key>: Extra inputs are not permitted``)."""


class TrainingConfigError(ValueError):
    """A value of the ``training`` block of the wrong type or out of range; ``key`` names the field."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


_NUMBERS = ("lora_r", "lora_alpha", "lora_dropout", "sequence_len", "learning_rate", "num_epochs")
_NUMBERS += ("warmup_ratio", "seed", "max_steps", "general_replay", "replay_kl_weight", "multi_turn_rows")
_NUMBERS += ("retrieval_k",)


class TrainingConfig(BaseModel):
    """One document's training hyperparameters, validated (and coerced) on construction.

    See the module docstring for the fields, their units and their source. ``extra`` holds every other
    key of the block, unvalidated.

    Raises:
        TrainingConfigError: a field is of the wrong type or out of range (the message names the key,
            e.g. ``training.lora_r must be in 1..256, not 0``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    adapter: Literal["lora", "qlora", "dora"] = "lora"
    lora_r: int = Field(8, ge=1, le=256)
    lora_alpha: int = Field(16, ge=1, le=1024)
    lora_dropout: float = Field(0.05, ge=0.0, le=0.5)
    target_modules: str | tuple[str, ...] = "auto"
    sequence_len: int = Field(2048, ge=64, le=32768)
    micro_batch_size: str | int = "auto"
    grad_accum: str | int = "auto"
    learning_rate: float = Field(2e-4, gt=0.0)
    num_epochs: int = Field(3, ge=1, le=1000)
    optimizer: Literal["adamw_torch", "adamw_bnb_8bit", "paged_adamw_8bit", "galore_adamw", "galore_adamw_8bit"] = (
        "adamw_torch"
    )
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_ratio: float = Field(0.1, ge=0.0, le=0.5)
    precision: Literal[None, "bf16", "fp16", "fp32"] = None
    seed: int = Field(42, ge=0, le=2**32 - 1)
    max_steps: int | None = Field(None, ge=1, le=1_000_000)
    general_replay: float = Field(0.0, ge=0.0, le=10.0)
    replay_kl_weight: float = Field(0.0, ge=0.0, le=100.0)
    multi_turn_rows: int = Field(0, ge=0, le=10_000)
    retrieval_k: int = Field(0, ge=0, le=MAX_RETRIEVAL_K)
    group_by_length: bool = Field(False, strict=True)
    extra: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _training_error(exc) from None

    @field_validator(*_NUMBERS, mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
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
        ``num_epochs × ceil(num_rows / (batch_size × accumulation))``; 0 for no rows."""
        if num_rows <= 0:
            return 0
        if self.max_steps is not None:
            return self.max_steps
        return self.num_epochs * math.ceil(num_rows / (self.batch_size() * self.accumulation()))

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


def _bounds(key: str) -> str:
    """``"in 1..256"`` (an integer field) or ``">= 0.0 and <= 0.5"`` (a number) from a field's bounds."""
    info = TrainingConfig.model_fields[key]
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


def _training_error(exc: ValidationError) -> TrainingConfigError:
    """The first error of ``exc`` as ``training.KEY must …, not VALUE`` (the form learnerd has always used)."""
    error = exc.errors(include_url=False)[0]
    key = str(error["loc"][0]) if error["loc"] else None
    kind, value = error["type"], error.get("input")
    if kind == "value_error":
        text = str(error["ctx"]["error"])
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        text = f"must be {_bounds(key)}, not {value}"
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
