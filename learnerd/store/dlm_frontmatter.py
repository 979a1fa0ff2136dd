"""The YAML frontmatter of a .dlm document: the fields learnerd reads, validated as dlm validates them.

Source of the format: dlm's ``src/dlm/doc/schema.py`` (``DlmFrontmatter``, ``TrainingConfig``) at schema
version 15. dlm forbids unknown keys; learnerd keeps them (``Frontmatter.raw``, ``TrainingConfig.extra``)
so a document written by a newer dlm still loads, and never rewrites the frontmatter text of an existing
document (byte-identical round trip). Numbers are coerced the way pydantic's lax mode does it, which
matters for YAML 1.1: PyYAML reads ``learning_rate: 2e-4`` (no dot) as the *string* ``"2e-4"``.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from learnerd.store.dlm_errors import DocumentError

#: dlm's ``CURRENT_SCHEMA_VERSION``: the newest ``dlm_version`` dlm (and so learnerd) understands.
CURRENT_DLM_VERSION = 15

_ULID_RE = re.compile(r"^[0-9A-HJ-KM-NP-TV-Z]{26}$")  # Crockford base32 without I, L, O, U
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now_s: float | None = None) -> str:
    """A fresh 26-character ULID: 48-bit Unix time in milliseconds, then 80 random bits, Crockford base32."""
    ms = int((time.time() if now_s is None else now_s) * 1000)
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in range(25, -1, -1))


class _Invalid(ValueError):
    """A value failed its check; the caller adds the location."""


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


def _target_modules(v: Any) -> str | tuple[str, ...]:
    if v == "auto":
        return "auto"
    if isinstance(v, list) and all(isinstance(m, str) and m for m in v):
        return tuple(v)
    raise _Invalid(f"must be 'auto' or a list of module names, not {v!r}")


# name -> (default, check): dlm's TrainingConfig flat fields, with its defaults and ranges.
_TRAINING_FIELDS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "adapter": ("lora", _choice("lora", "qlora", "dora")),
    "lora_r": (8, _int(1, 256)),
    "lora_alpha": (16, _int(1)),
    "lora_dropout": (0.05, _float(0.0, 0.5)),
    "target_modules": ("auto", _target_modules),
    "sequence_len": (2048, _int(64, 32768)),
    "micro_batch_size": ("auto", _auto_or_positive_int),
    "grad_accum": ("auto", _auto_or_positive_int),
    "learning_rate": (2e-4, _float(0.0, lo_open=True)),
    "num_epochs": (3, _int(1)),
    "optimizer": (
        "adamw_torch",
        _choice("adamw_torch", "adamw_bnb_8bit", "paged_adamw_8bit", "galore_adamw", "galore_adamw_8bit"),
    ),
    "lr_scheduler": ("cosine", _choice("cosine", "linear", "constant")),
    "warmup_ratio": (0.1, _float(0.0, 0.5)),
    "precision": (None, _choice(None, "bf16", "fp16", "fp32")),
    "seed": (42, _int()),
}


@dataclass(frozen=True)
class TrainingConfig:
    """The ``training:`` block's single-adapter fields, with dlm's defaults and ranges.

    ``lora_r`` in 1..256, ``lora_alpha`` >= 1, ``lora_dropout`` in 0..0.5, ``sequence_len`` (tokens) in
    64..32768, ``learning_rate`` > 0, ``num_epochs`` >= 1, ``warmup_ratio`` in 0..0.5 (fraction of the
    optimizer steps), ``micro_batch_size`` / ``grad_accum`` a positive int or ``"auto"``. dlm has no
    step-count field: the length of a run is ``num_epochs`` over the document's rows. ``extra`` holds
    every other key of the block (``preference``, ``cpt``, ``adapters``, ``sources``, unknown keys)
    unvalidated.
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
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Frontmatter:
    """The validated frontmatter. ``raw`` is the whole YAML mapping as parsed, unknown keys included."""

    dlm_id: str
    base_model: str
    dlm_version: int = CURRENT_DLM_VERSION
    training: TrainingConfig = field(default_factory=TrainingConfig)
    system_prompt: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


def parse_frontmatter(yaml_text: str, *, path: str | Path | None = None, first_line: int = 2) -> Frontmatter:
    """Parse and validate the YAML between the two ``---`` lines.

    Args:
        yaml_text: the frontmatter text, LF line ends, delimiters excluded.
        path: the file, for error messages.
        first_line: the file line number of the first line of ``yaml_text``.

    Raises:
        DocumentError: not YAML, not a mapping, or a field learnerd reads is missing or out of range;
            ``line`` points at the offending key where it can be found.
    """
    try:
        raw = yaml.safe_load(yaml_text) if yaml_text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = first_line + mark.line if mark is not None else first_line
        raise DocumentError(f"frontmatter is not valid YAML: {exc}", path=path, line=line) from None
    except (ValueError, TypeError, RecursionError) as exc:  # PyYAML constructors: e.g. a 13th month in a date
        raise DocumentError(f"frontmatter is not valid YAML: {exc}", path=path, line=first_line) from None
    if not isinstance(raw, dict):
        raise DocumentError(f"frontmatter must be a mapping, not {type(raw).__name__}", path=path, line=first_line)

    def fail(message: str, *keys: str) -> DocumentError:
        return DocumentError(message, path=path, line=first_line + _key_line(yaml_text, keys))

    dlm_id = raw.get("dlm_id")
    if not isinstance(dlm_id, str) or not _ULID_RE.fullmatch(dlm_id):
        raise fail(f"dlm_id must be a 26-character Crockford base32 ULID, not {dlm_id!r}", "dlm_id")
    version = raw.get("dlm_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= CURRENT_DLM_VERSION:
        raise fail(f"dlm_version must be an integer in 1..{CURRENT_DLM_VERSION}, not {version!r}", "dlm_version")
    base_model = raw.get("base_model")
    if not isinstance(base_model, str) or not base_model:
        raise fail(f"base_model must be a non-empty string, not {base_model!r}", "base_model")
    system_prompt = raw.get("system_prompt")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise fail("system_prompt must be a string", "system_prompt")
    training_raw = raw.get("training", {})
    if not isinstance(training_raw, dict):
        raise fail("training must be a mapping", "training")
    values: dict[str, Any] = {}
    for name, (default, check) in _TRAINING_FIELDS.items():
        try:
            values[name] = check(training_raw[name]) if name in training_raw else default
        except _Invalid as exc:
            raise fail(f"training.{name} {exc}", "training", name) from None
    extra = {k: v for k, v in training_raw.items() if k not in _TRAINING_FIELDS}
    return Frontmatter(
        dlm_id=dlm_id,
        dlm_version=version,
        base_model=base_model,
        training=TrainingConfig(**values, extra=extra),
        system_prompt=system_prompt,
        raw=raw,
    )


def _key_line(yaml_text: str, keys: tuple[str, ...]) -> int:
    """0-based line of the deepest of ``keys`` (a path of mapping keys) found in ``yaml_text``, else 0."""
    try:
        node = yaml.compose(yaml_text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 0
    line = 0
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == key:
                line, node = key_node.start_mark.line, value_node
                break
        else:
            break
    return line


def render_frontmatter(
    *,
    dlm_id: str,
    base_model: str,
    dlm_version: int = CURRENT_DLM_VERSION,
    training: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> str:
    """The YAML text (no ``---`` delimiters, ending in LF) of a new document's frontmatter."""
    data: dict[str, Any] = {"dlm_id": dlm_id, "dlm_version": dlm_version, "base_model": base_model}
    if training:
        data["training"] = dict(training)
    if system_prompt is not None:
        data["system_prompt"] = system_prompt
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
