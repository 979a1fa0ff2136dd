"""The sway report (schema_version 1): load with validation, build, dump.

Source of the format: sway's ``src/dlm_sway/suite/report.py`` (``to_json`` / ``_probe_to_jsonable``) and
``core/result.py``, checked against a real report (``peer-data/dlm/audit/sway-results.json``)::

    {
      "schema_version": 1, "sway_version": "0.1.0", "spec_path": "...",
      "base_model_id": "...", "adapter_id": "...",
      "started_at": "<ISO-8601>", "finished_at": "<ISO-8601>", "wall_seconds": 83.5,
      "score": {"overall": 0.57, "band": "partial", "components": {...}, "weights": {...}, "findings": [...]},
      "determinism": {...} | null, "backend_stats": {...}, "null_stats": {...},
      "probes": [
        {"name": "dk_fortran", "kind": "delta_kl", "verdict": "pass|fail|warn|skip|error",
         "score": 0.49 | null, "raw": 0.15 | null, "z_score": ..., "base_value": ..., "ft_value": ...,
         "evidence": {...}, "message": "...", "duration_s": 0.33, "ci_95": [lo, hi] | null}
      ]
    }

Required (refused when missing or mistyped): the top-level ``schema_version``, ``sway_version``,
``base_model_id``, ``adapter_id``, ``started_at``, ``finished_at``, ``wall_seconds``, ``score``
(with ``overall``), ``probes``; per probe ``name`` (unique), ``kind``, ``verdict``, ``score``, ``raw``,
``evidence``, ``message``. The rest is optional; keys this model does not know are kept in ``extra``
and written back by :func:`dump_report`. Per-probe ``evidence`` is free-form (its shape depends on
``kind``) and is not validated here. The classes are pydantic dataclasses: a file is validated by pydantic in
strict JSON mode (no string for a number, no boolean for a number), and pydantic's errors are reported as
:class:`ReportError` with the JSON path of the bad value.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from learnerd.store.atomic import atomic_write_text

SCHEMA_VERSION = 1


class Verdict(StrEnum):
    """A probe's outcome."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"


class ReportError(ValueError):
    """A report is unreadable or malformed. ``field`` is the JSON path of the bad value (``probes[2].verdict``)
    or ``""``; ``line`` is the 1-based line of a JSON syntax error, else 0."""

    def __init__(self, message: str, *, source: str | Path | None = None, field: str = "", line: int = 0) -> None:
        self.message = message
        self.source = str(source) if source is not None else "<report>"
        self.field = field
        self.line = line
        where = f"{self.source}:{line}" if line else self.source
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


def _number(value: Any) -> Any:
    if isinstance(value, bool | str):  # JSON's true and "0.5" are no numbers
        raise ValueError(f"must be a number, not {_json_type(value)}")
    return value


def _number_or_null(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError(f"must be a number or null, not {_json_type(value)}")
    return value


def _timestamp(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be an ISO-8601 timestamp, not {value!r}") from None


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, not {_json_type(value)}")
    return value


Number = Annotated[float, BeforeValidator(_number)]
"""A JSON number (not a boolean, not a numeric string); nan and inf pass (sway writes them as null)."""
NumberOrNull = Annotated[float | None, BeforeValidator(_number_or_null)]
Timestamp = Annotated[datetime, BeforeValidator(_timestamp)]
"""An ISO-8601 string (``datetime.fromisoformat``)."""
Integer = Annotated[int, BeforeValidator(_integer)]


@dataclass(frozen=True)
class Score:
    """The composite score: ``overall`` in [0, 1], its ``band`` (noise / partial / healthy / suspicious),
    per-category ``components`` and ``weights``, and one-line ``findings``."""

    overall: Number
    band: str = ""
    components: Mapping[str, Number] = field(default_factory=dict)
    weights: Mapping[str, Number] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_to_extra(cls, data: Any) -> Any:
        return _split_extra(cls, data)


@dataclass(frozen=True)
class ProbeResult:
    """One probe's result. ``score`` is normalized to [0, 1] (None when skipped); ``raw`` is the probe's
    own metric in its own unit (e.g. JS divergence in nats); ``z_score`` is in standard deviations of the
    null-adapter baseline; ``duration_s`` in seconds; ``ci_95`` a bootstrap 95% interval on ``raw``."""

    name: str
    kind: str
    verdict: Verdict
    score: NumberOrNull
    raw: NumberOrNull
    evidence: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    z_score: NumberOrNull = None
    base_value: NumberOrNull = None
    ft_value: NumberOrNull = None
    duration_s: Number = 0.0
    ci_95: tuple[Number, Number] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_to_extra(cls, data: Any) -> Any:
        for key in ("evidence", "message"):  # defaults for learnerd's own results, required in a report
            if isinstance(data, dict) and key not in data:
                raise PydanticCustomError("missing_key", "missing", {"key": key})
        return _split_extra(cls, data)


@dataclass(frozen=True)
class Report:
    """A whole report. ``wall_seconds`` in seconds; ``started_at`` / ``finished_at`` timezone-aware
    where the writer made them so."""

    sway_version: str
    base_model_id: str
    adapter_id: str
    started_at: Timestamp
    finished_at: Timestamp
    wall_seconds: Number
    score: Score
    probes: tuple[ProbeResult, ...]
    schema_version: Integer = SCHEMA_VERSION
    spec_path: str = ""
    determinism: Mapping[str, Any] | None = None
    backend_stats: Mapping[str, Any] = field(default_factory=dict)
    null_stats: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_to_extra(cls, data: Any) -> Any:
        return _split_extra(cls, data)

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, version: int) -> int:
        if version != SCHEMA_VERSION:
            newer = " (newer than this learnerd reads)" if version > SCHEMA_VERSION else ""
            raise ValueError(f"is {version}{newer}; learnerd reads schema_version {SCHEMA_VERSION}")
        return version


# -- loading --------------------------------------------------------------------------------------


def load_report(path: str | Path) -> Report:
    """Read and validate the report at ``path``.

    Raises:
        ReportError: the file is missing or unreadable, not JSON, or not a schema-1 sway report.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read the report: {exc}", source=path) from None
    return parse_report(text, source=path)


def parse_report(text: str, *, source: str | Path | None = None) -> Report:
    """Validate report JSON text (see the module docstring for what is required).

    Raises:
        ReportError: not JSON (with its line), or a field is missing or of the wrong type (with its path).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"not valid JSON: {exc.msg} (column {exc.colno})", source=source, line=exc.lineno) from None
    except RecursionError:
        raise ReportError("not valid JSON: nested too deeply", source=source) from None
    if not isinstance(data, dict):
        raise ReportError(f"must be an object, not {_json_type(data)}", source=source, field="(top level)")
    try:
        report = _REPORT.validate_python(data)
    except ValidationError as exc:
        raise _report_error(exc, source) from None
    seen: set[str] = set()
    for i, p in enumerate(report.probes):
        if not p.name:
            raise ReportError("must not be empty", source=source, field=f"probes[{i}].name")
        if p.name in seen:
            raise ReportError(f"{p.name!r} is not unique", source=source, field=f"probes[{i}].name")
        seen.add(p.name)
    return report


def _split_extra(cls: type, data: Any) -> Any:
    """A JSON object with the keys ``cls`` does not declare moved into its ``extra``."""
    if not isinstance(data, dict):
        return data
    known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return {**{k: v for k, v in data.items() if k in known}, "extra": {k: v for k, v in data.items() if k not in known}}


_REPORT = TypeAdapter(Report)

_KINDS = {
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "list_type": "an array",
    "tuple_type": "an array",
    "dict_type": "an object",
    "mapping_type": "an object",
    "dataclass_type": "an object",
}


def _path(loc: tuple[Any, ...]) -> str:
    """``("probes", 2, "verdict")`` → ``"probes[2].verdict"``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f"{'.' if out else ''}{part}"
    return out


def _report_error(exc: ValidationError, source: str | Path | None) -> ReportError:
    """The first of pydantic's errors as a :class:`ReportError` naming the JSON path of the bad value."""
    error = exc.errors(include_url=False)[0]
    where, kind, value = _path(tuple(error["loc"])), error["type"], error.get("input")
    if kind == "missing_key":
        where = _path((*error["loc"], error["ctx"]["key"]))
    if kind in ("missing", "missing_key"):
        message = "missing"
    elif kind == "value_error":
        message = str(error["ctx"]["error"])
    elif kind == "enum":
        message = f"must be one of {'/'.join(v.value for v in Verdict)}, not {value!r}"
    elif kind in ("too_short", "too_long") and where.endswith("ci_95"):
        message = "must be [lo, hi] or null"
    elif kind in _KINDS:
        message = f"must be {_KINDS[kind]}, not {_json_type(value)}"
    else:
        message = error["msg"]
    return ReportError(message, source=source, field=where or "(top level)")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# -- dumping --------------------------------------------------------------------------------------


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as sway's JSON object (every key sway writes, plus ``extra``)."""
    score = report.score
    return {
        **report.extra,
        "schema_version": report.schema_version,
        "sway_version": report.sway_version,
        "spec_path": report.spec_path,
        "base_model_id": report.base_model_id,
        "adapter_id": report.adapter_id,
        "started_at": report.started_at.isoformat(),
        "finished_at": report.finished_at.isoformat(),
        "wall_seconds": report.wall_seconds,
        "determinism": dict(report.determinism) if report.determinism is not None else None,
        "backend_stats": dict(report.backend_stats),
        "score": {
            **score.extra,
            "overall": score.overall,
            "band": score.band,
            "components": dict(score.components),
            "weights": dict(score.weights),
            "findings": list(score.findings),
        },
        "null_stats": dict(report.null_stats),
        "probes": [_probe_to_dict(p) for p in report.probes],
    }


def _probe_to_dict(p: ProbeResult) -> dict[str, Any]:
    return {
        **p.extra,
        "name": p.name,
        "kind": p.kind,
        "verdict": p.verdict.value,
        "score": p.score,
        "raw": p.raw,
        "z_score": p.z_score,
        "base_value": p.base_value,
        "ft_value": p.ft_value,
        "evidence": dict(p.evidence),
        "message": p.message,
        "duration_s": p.duration_s,
        "ci_95": list(p.ci_95) if p.ci_95 is not None else None,
    }


def dump_report(report: Report) -> str:
    """The report as JSON text, laid out as sway lays it out (2-space indent, sorted keys, final newline).
    Non-finite numbers are written as null (sway nulls them too), so the output is strict JSON."""
    return json.dumps(_finite(report_to_dict(report)), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_report(path: str | Path, report: Report) -> None:
    """Write :func:`dump_report` to ``path`` atomically."""
    atomic_write_text(path, dump_report(report))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
