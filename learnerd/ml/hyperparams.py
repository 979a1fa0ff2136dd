"""Training hyperparameters: the ``training`` block of a ``.dlm`` document's frontmatter.

Field names, defaults and ranges are dlm's (``dlm.doc.schema.TrainingConfig``, schema v15): LoRA rank
``lora_r`` 8, ``lora_alpha`` 16, ``lora_dropout`` 0.05, ``learning_rate`` 2e-4, ``sequence_len`` 2048,
``num_epochs`` 3, cosine schedule with ``warmup_ratio`` 0.1, ``seed`` 42, ``target_modules`` ``"auto"``
(here: every linear layer but the output head, peft's ``"all-linear"``).

learnerd adds one key dlm does not have: ``max_steps``, a step budget per training cycle (optimizer
steps; it replaces ``num_epochs`` when set). dlm keys that learnerd accepts but does not act on — they
concern features learnerd does not have (preference training, continued pre-training schedules, named
multi-adapters, GPU precision, ...) — are listed in :data:`IGNORED_DLM_KEYS`, so a document written for
dlm still loads. Any other key is refused, so a typo never goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ADAPTER_KINDS = ("lora", "dora")
OPTIMIZERS = ("adamw_torch",)
LR_SCHEDULERS = ("cosine", "linear", "constant")
IGNORED_DLM_KEYS = frozenset(
    {"precision", "preference", "cpt", "gate", "cache", "audio", "adapters", "sources", "sources_policy"}
)
AUTO_MICRO_BATCH_SIZE = 8
"""What ``micro_batch_size: auto`` means here (dlm asks its hardware doctor; learnerd trains on CPU)."""


class TrainingConfigError(ValueError):
    """A ``training`` block with an unknown key, or a value of the wrong type or out of dlm's range."""


@dataclass(frozen=True)
class TrainingConfig:
    """One document's training hyperparameters (immutable). See the module docstring for the source.

    ``micro_batch_size`` and ``grad_accum`` may be ``"auto"``: :meth:`batch_size` and
    :meth:`accumulation` resolve them (8 rows, 1 step).
    """

    adapter: Literal["lora", "dora"] = "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "auto"
    sequence_len: int = 2048
    micro_batch_size: int | Literal["auto"] = "auto"
    grad_accum: int | Literal["auto"] = "auto"
    learning_rate: float = 2e-4
    num_epochs: int = 3
    optimizer: Literal["adamw_torch"] = "adamw_torch"
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_ratio: float = 0.1
    seed: int = 42
    max_steps: int | None = None

    def __post_init__(self) -> None:
        tm = self.target_modules
        checks = (
            ("adapter", self.adapter in ADAPTER_KINDS, f"must be one of {', '.join(ADAPTER_KINDS)}"),
            ("lora_r", _is_int(self.lora_r) and 1 <= self.lora_r <= 256, "must be an integer in 1..256"),
            ("lora_alpha", _is_int(self.lora_alpha) and self.lora_alpha >= 1, "must be an integer >= 1"),
            ("lora_dropout", _is_real(self.lora_dropout) and 0.0 <= self.lora_dropout <= 0.5, "must be in 0..0.5"),
            (
                "target_modules",
                tm == "auto" or (isinstance(tm, tuple) and bool(tm) and all(isinstance(m, str) and m for m in tm)),
                'must be "auto" or a non-empty list of module names',
            ),
            ("sequence_len", _is_int(self.sequence_len) and 64 <= self.sequence_len <= 32768, "must be in 64..32768"),
            ("micro_batch_size", _is_auto_or_positive(self.micro_batch_size), 'must be a positive integer or "auto"'),
            ("grad_accum", _is_auto_or_positive(self.grad_accum), 'must be a positive integer or "auto"'),
            (
                "learning_rate",
                _is_real(self.learning_rate) and 0 < self.learning_rate < math.inf,
                "must be a finite number > 0",
            ),
            ("num_epochs", _is_int(self.num_epochs) and self.num_epochs >= 1, "must be an integer >= 1"),
            ("optimizer", self.optimizer in OPTIMIZERS, f"must be {' or '.join(OPTIMIZERS)} on learnerd (CPU)"),
            ("lr_scheduler", self.lr_scheduler in LR_SCHEDULERS, f"must be one of {', '.join(LR_SCHEDULERS)}"),
            ("warmup_ratio", _is_real(self.warmup_ratio) and 0.0 <= self.warmup_ratio <= 0.5, "must be in 0..0.5"),
            ("seed", _is_int(self.seed), "must be an integer"),
            (
                "max_steps",
                self.max_steps is None or (_is_int(self.max_steps) and self.max_steps >= 1),
                "must be a positive integer",
            ),
        )
        for key, ok, rule in checks:
            if not ok:
                raise TrainingConfigError(f"training.{key} {rule}, not {getattr(self, key)!r}")

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
        """A JSON-ready dict (``target_modules`` as a list); :func:`training_config_from_mapping` reads it back."""
        out = dataclasses.asdict(self)
        if isinstance(self.target_modules, tuple):
            out["target_modules"] = list(self.target_modules)
        return out


def training_config_from_mapping(raw: Mapping[str, Any] | None) -> TrainingConfig:
    """Build a :class:`TrainingConfig` from a parsed ``training`` block (a YAML mapping, or None).

    Keys of :data:`IGNORED_DLM_KEYS` are accepted and dropped; ``target_modules`` may be a list.

    Raises:
        TrainingConfigError: ``raw`` is not a mapping, has an unknown key, or a value is out of range
            (the message names the key, e.g. ``training.lora_r must be an integer in 1..256, not 0``).
    """
    if raw is None:
        return TrainingConfig()
    if not isinstance(raw, Mapping):
        raise TrainingConfigError(f"training must be a mapping, not {type(raw).__name__}")
    known = {f.name for f in dataclasses.fields(TrainingConfig)}
    unknown = sorted(str(k) for k in raw if k not in known and k not in IGNORED_DLM_KEYS)
    if unknown:
        raise TrainingConfigError(f"unknown key(s) in training: {', '.join(unknown)}")
    values = {k: v for k, v in raw.items() if k in known}
    if isinstance(values.get("target_modules"), list):
        values["target_modules"] = tuple(values["target_modules"])
    for key in ("learning_rate", "lora_dropout", "warmup_ratio"):
        if _is_int(values.get(key)):
            values[key] = float(values[key])
    return TrainingConfig(**values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_auto_or_positive(value: Any) -> bool:
    return value == "auto" or (_is_int(value) and value >= 1)
