"""The ``training`` block of a .dlm document's frontmatter: learnerd's one definition of its fields.

Field names, defaults and ranges are dlm's (``src/dlm/doc/schema.py``, ``TrainingConfig``, schema v15):
LoRA rank ``lora_r`` 8 (1..256), ``lora_alpha`` 16, ``lora_dropout`` 0.05 (0..0.5), ``learning_rate``
2e-4 (> 0), ``sequence_len`` 2048 tokens (64..32768), ``num_epochs`` 3, a ``cosine`` schedule with
``warmup_ratio`` 0.1 (0..0.5, a fraction of the optimizer steps), ``seed`` 42, ``target_modules``
``"auto"`` (every linear layer but the output head: peft's ``"all-linear"``), ``micro_batch_size`` and
``grad_accum`` ``"auto"`` (8 rows and 1 micro-batch per step on learnerd, which trains on CPU).

learnerd adds one key dlm does not have: ``max_steps``, a budget of optimizer steps per training cycle
that replaces ``num_epochs`` when set (``None`` by default).

Numbers are coerced the way pydantic's lax mode does it, which matters for YAML 1.1: PyYAML reads
``learning_rate: 2e-4`` (no dot) as the *string* ``"2e-4"``. Keys dlm knows but that are not single-adapter
fields (``preference``, ``cpt``, ``adapters``, ``sources``, ...: :data:`DLM_BLOCK_KEYS`) and keys nobody
knows are kept, unvalidated, in :attr:`TrainingConfig.extra`, so a document written by a newer dlm still
parses; :meth:`TrainingConfig.unknown_keys` names the ones dlm would refuse, and learnerd's trainer
(``learnerd.ml.hyperparams.check_trainable``) refuses them too, so a typo never trains silently.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

AUTO_MICRO_BATCH_SIZE = 8
"""Rows per forward pass when ``micro_batch_size`` is ``"auto"`` (dlm asks its hardware doctor)."""

DLM_BLOCK_KEYS = frozenset({"preference", "cpt", "gate", "cache", "audio", "adapters", "sources", "sources_policy"})
"""Keys of dlm's training block that are not single-adapter fields: kept in ``extra``, not acted on."""


class TrainingConfigError(ValueError):
    """A value of the ``training`` block of the wrong type or out of range; ``key`` names the field."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class _Invalid(ValueError):
    """A value failed its check; the caller adds the field name."""


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool):
            raise _Invalid(f"must be an integer, not {v!r}")
        if (isinstance(v, float) and v.is_integer()) or (isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v)):
            v = int(v)
        if not isinstance(v, int):
            raise _Invalid(f"must be an integer, not {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise _Invalid(f"must be in {lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}, not {v}")
        return v

    return check


def _float(lo: float, hi: float | None = None, *, lo_open: bool = False) -> Callable[[Any], float]:
    def check(v: Any) -> float:
        if isinstance(v, bool):
            raise _Invalid(f"must be a number, not {v!r}")
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise _Invalid(f"must be a number, not {v!r}") from None
        if not isinstance(v, int | float) or not math.isfinite(v):
            raise _Invalid(f"must be a finite number, not {v!r}")
        if v < lo or (lo_open and v == lo) or (hi is not None and v > hi):
            raise _Invalid(
                f"must be {'>' if lo_open else '>='} {lo}{f' and <= {hi}' if hi is not None else ''}, not {v}"
            )
        return float(v)

    return check


def _choice(*allowed: str | None) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in allowed or isinstance(v, bool):
            raise _Invalid(f"must be one of {', '.join(repr(a) for a in allowed)}, not {v!r}")
        return v

    return check


def _auto_or_positive_int(v: Any) -> str | int:
    return "auto" if v == "auto" else _int(1)(v)


def _optional_positive_int(v: Any) -> int | None:
    return None if v is None else _int(1)(v)


def _target_modules(v: Any) -> str | tuple[str, ...]:
    if v == "auto":
        return "auto"
    if isinstance(v, list | tuple) and v and all(isinstance(m, str) and m for m in v):
        return tuple(v)
    raise _Invalid(f"must be 'auto' or a non-empty list of module names, not {v!r}")


#: field name -> check (returns the coerced value or raises ``_Invalid``); the defaults are the dataclass's.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "adapter": _choice("lora", "qlora", "dora"),
    "lora_r": _int(1, 256),
    "lora_alpha": _int(1),
    "lora_dropout": _float(0.0, 0.5),
    "target_modules": _target_modules,
    "sequence_len": _int(64, 32768),
    "micro_batch_size": _auto_or_positive_int,
    "grad_accum": _auto_or_positive_int,
    "learning_rate": _float(0.0, lo_open=True),
    "num_epochs": _int(1),
    "optimizer": _choice("adamw_torch", "adamw_bnb_8bit", "paged_adamw_8bit", "galore_adamw", "galore_adamw_8bit"),
    "lr_scheduler": _choice("cosine", "linear", "constant"),
    "warmup_ratio": _float(0.0, 0.5),
    "precision": _choice(None, "bf16", "fp16", "fp32"),
    "seed": _int(),
    "max_steps": _optional_positive_int,
}


@dataclass(frozen=True)
class TrainingConfig:
    """One document's training hyperparameters, validated (and coerced) on construction.

    See the module docstring for the fields, their units and their source. ``extra`` holds every other
    key of the block, unvalidated.

    Raises:
        TrainingConfigError: a field is of the wrong type or out of range (the message names the key,
            e.g. ``training.lora_r must be in 1..256, not 0``).
    """

    adapter: str = "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "auto"
    sequence_len: int = 2048
    micro_batch_size: str | int = "auto"
    grad_accum: str | int = "auto"
    learning_rate: float = 2e-4
    num_epochs: int = 3
    optimizer: str = "adamw_torch"
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.1
    precision: str | None = None
    seed: int = 42
    max_steps: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            try:
                object.__setattr__(self, name, check(getattr(self, name)))
            except _Invalid as exc:
                raise TrainingConfigError(f"training.{name} {exc}", key=name) from None

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
        known = {k: v for k, v in raw.items() if k in _CHECKS}
        return cls(**known, extra={k: v for k, v in raw.items() if k not in _CHECKS})

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
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        if isinstance(self.target_modules, tuple):
            out["target_modules"] = list(self.target_modules)
        return {**out, **self.extra}
