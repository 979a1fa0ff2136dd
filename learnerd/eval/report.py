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
``kind``) and is not validated here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class Score:
    """The composite score: ``overall`` in [0, 1], its ``band`` (noise / partial / healthy / suspicious),
    per-category ``components`` and ``weights``, and one-line ``findings``."""

    overall: float
    band: str = ""
    components: Mapping[str, float] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeResult:
    """One probe's result. ``score`` is normalized to [0, 1] (None when skipped); ``raw`` is the probe's
    own metric in its own unit (e.g. JS divergence in nats); ``z_score`` is in standard deviations of the
    null-adapter baseline; ``duration_s`` in seconds; ``ci_95`` a bootstrap 95% interval on ``raw``."""

    name: str
    kind: str
    verdict: Verdict
    score: float | None
    raw: float | None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    z_score: float | None = None
    base_value: float | None = None
    ft_value: float | None = None
    duration_s: float = 0.0
    ci_95: tuple[float, float] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """A whole report. ``wall_seconds`` in seconds; ``started_at`` / ``finished_at`` timezone-aware
    where the writer made them so."""

    sway_version: str
    base_model_id: str
    adapter_id: str
    started_at: datetime
    finished_at: datetime
    wall_seconds: float
    score: Score
    probes: tuple[ProbeResult, ...]
    schema_version: int = SCHEMA_VERSION
    spec_path: str = ""
    determinism: Mapping[str, Any] | None = None
    backend_stats: Mapping[str, Any] = field(default_factory=dict)
    null_stats: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


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
    return _Reader(source).report(data)


class _Reader:
    def __init__(self, source: str | Path | None) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> ReportError:
        return ReportError(message, source=self.source, field=where)

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be an object, not {_json_type(value)}")
        return value

    def req(self, data: dict[str, Any], key: str, where: str) -> Any:
        if key not in data:
            raise self.fail(f"{where}.{key}" if where else key, "missing")
        return data[key]

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"must be a string, not {_json_type(value)}")
        return value

    def number(self, value: Any, where: str, *, nullable: bool = False) -> float | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"must be a number{' or null' if nullable else ''}, not {_json_type(value)}")
        return float(value)

    def timestamp(self, value: Any, where: str) -> datetime:
        try:
            return datetime.fromisoformat(self.string(value, where))
        except ValueError:
            raise self.fail(where, f"must be an ISO-8601 timestamp, not {value!r}") from None

    def report(self, data: Any) -> Report:
        top = self.obj(data, "(top level)")
        version = self.req(top, "schema_version", "")
        if isinstance(version, bool) or not isinstance(version, int):
            raise self.fail("schema_version", f"must be an integer, not {_json_type(version)}")
        if version != SCHEMA_VERSION:
            newer = " (newer than this learnerd reads)" if version > SCHEMA_VERSION else ""
            raise self.fail("schema_version", f"is {version}{newer}; learnerd reads schema_version {SCHEMA_VERSION}")
        probes_raw = self.req(top, "probes", "")
        if not isinstance(probes_raw, list):
            raise self.fail("probes", f"must be an array, not {_json_type(probes_raw)}")
        probes = tuple(self.probe(p, f"probes[{i}]") for i, p in enumerate(probes_raw))
        seen: set[str] = set()
        for i, p in enumerate(probes):
            if p.name in seen:
                raise self.fail(f"probes[{i}].name", f"{p.name!r} is not unique")
            seen.add(p.name)
        determinism = top.get("determinism")
        if determinism is not None:
            self.obj(determinism, "determinism")
        known = {
            "schema_version", "sway_version", "base_model_id", "adapter_id", "started_at", "finished_at",
            "wall_seconds", "score", "probes", "spec_path", "determinism", "backend_stats", "null_stats",
        }  # fmt: skip
        return Report(
            schema_version=version,
            sway_version=self.string(self.req(top, "sway_version", ""), "sway_version"),
            base_model_id=self.string(self.req(top, "base_model_id", ""), "base_model_id"),
            adapter_id=self.string(self.req(top, "adapter_id", ""), "adapter_id"),
            started_at=self.timestamp(self.req(top, "started_at", ""), "started_at"),
            finished_at=self.timestamp(self.req(top, "finished_at", ""), "finished_at"),
            wall_seconds=self.number(self.req(top, "wall_seconds", ""), "wall_seconds") or 0.0,
            score=self.score(self.req(top, "score", ""), "score"),
            probes=probes,
            spec_path=self.string(top.get("spec_path", ""), "spec_path"),
            determinism=determinism,
            backend_stats=self.obj(top.get("backend_stats", {}), "backend_stats"),
            null_stats=self.obj(top.get("null_stats", {}), "null_stats"),
            extra={k: v for k, v in top.items() if k not in known},
        )

    def score(self, value: Any, where: str) -> Score:
        data = self.obj(value, where)
        findings = data.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
            raise self.fail(f"{where}.findings", "must be an array of strings")
        maps = {}
        for key in ("components", "weights"):
            m = self.obj(data.get(key, {}), f"{where}.{key}")
            maps[key] = {k: self.number(v, f"{where}.{key}.{k}") for k, v in m.items()}
        return Score(
            overall=self.number(self.req(data, "overall", where), f"{where}.overall") or 0.0,
            band=self.string(data.get("band", ""), f"{where}.band"),
            components=maps["components"],
            weights=maps["weights"],
            findings=tuple(findings),
            extra={k: v for k, v in data.items() if k not in ("overall", "band", "components", "weights", "findings")},
        )

    def probe(self, value: Any, where: str) -> ProbeResult:
        data = self.obj(value, where)
        verdict_raw = self.req(data, "verdict", where)
        try:
            verdict = Verdict(verdict_raw)
        except ValueError:
            allowed = "/".join(v.value for v in Verdict)
            raise self.fail(f"{where}.verdict", f"must be one of {allowed}, not {verdict_raw!r}") from None
        name = self.string(self.req(data, "name", where), f"{where}.name")
        if not name:
            raise self.fail(f"{where}.name", "must not be empty")
        ci = data.get("ci_95")
        if ci is not None:
            if not isinstance(ci, list) or len(ci) != 2:
                raise self.fail(f"{where}.ci_95", "must be [lo, hi] or null")
            ci = (self.number(ci[0], f"{where}.ci_95[0]"), self.number(ci[1], f"{where}.ci_95[1]"))
        known = {"name", "kind", "verdict", "score", "raw", "evidence", "message", "z_score", "base_value",
                 "ft_value", "duration_s", "ci_95"}  # fmt: skip
        return ProbeResult(
            name=name,
            kind=self.string(self.req(data, "kind", where), f"{where}.kind"),
            verdict=verdict,
            score=self.number(self.req(data, "score", where), f"{where}.score", nullable=True),
            raw=self.number(self.req(data, "raw", where), f"{where}.raw", nullable=True),
            evidence=self.obj(self.req(data, "evidence", where), f"{where}.evidence"),
            message=self.string(self.req(data, "message", where), f"{where}.message"),
            z_score=self.number(data.get("z_score"), f"{where}.z_score", nullable=True),
            base_value=self.number(data.get("base_value"), f"{where}.base_value", nullable=True),
            ft_value=self.number(data.get("ft_value"), f"{where}.ft_value", nullable=True),
            duration_s=self.number(data.get("duration_s", 0.0), f"{where}.duration_s") or 0.0,
            ci_95=ci,
            extra={k: v for k, v in data.items() if k not in known},
        )


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
