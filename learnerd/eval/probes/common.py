"""What a probe module builds with: the base of its ``Options``, the knob the divergence probes share, the
z-score, and the constructors of a :class:`~learnerd.eval.report.ProbeResult`.

A probe module imports from here and from nothing of the registry above it (:mod:`learnerd.eval.probes`,
:mod:`learnerd.eval.probes.base`), which composes the run's options out of the modules' ``Options``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from learnerd.eval.backend import View
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.sections import Section

ViewFactory = Callable[[], AbstractContextManager[View]]
"""Opens the view a probe measures as its fine-tuned side: the adapter, or a null adapter."""


class NotApplicable(Exception):
    """The probe cannot run on this document or base (the message is the reason); it is skipped."""


class ProbeOptions(BaseModel):
    """The base of a probe module's ``Options``: validated like the config (:class:`learnerd.sections.Section`:
    unknown keys refused, no type coercion, no nan/inf; a bad value raises ``pydantic.ValidationError``, a
    ``ValueError``) and frozen. Field names are global: :class:`~learnerd.eval.probes.base.EvalOptions` is
    flat, and refuses two modules that declare the same name."""

    model_config = ConfigDict(**Section.model_config, frozen=True)


class Options(ProbeOptions):
    """The knob every probe that compares next-token distributions reads."""

    top_k: int = Field(256, ge=1)
    """tokens kept per next-token distribution (the rest is tail mass): sway's ``top_k``"""


class Calibrated(Protocol):
    """What :func:`z_score` reads of a probe's context (:class:`~learnerd.eval.probes.base.ProbeContext`): the
    null-adapter statistics per probe kind, ``{"mean", "std", "n", "degenerate"}``."""

    null_stats: dict[str, dict[str, float]]


def z_score(ctx: Calibrated, kind: str, raw: float) -> float | None:
    """Standard deviations of ``raw`` above the null-adapter mean of ``kind``; None uncalibrated, or when the
    null samples were degenerate (one sample, or all equal: sway's rule, ``probes/_zscore.py``)."""
    null = ctx.null_stats.get(kind)
    if null is None or not null.get("std", 0.0) > 0.0 or null.get("degenerate", 0.0) >= 0.5:
        return None
    return (raw - null["mean"]) / null["std"]


def sigmoid(x: float) -> float:
    """``1 / (1 + e^-x)``, overflow-safe."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def result(
    name: str,
    kind: str,
    verdict: Verdict,
    *,
    score: float | None,
    raw: float | None,
    evidence: Mapping[str, Any],
    message: str,
    started: float,
    z: float | None = None,
    base_value: float | None = None,
    ft_value: float | None = None,
) -> ProbeResult:
    """A :class:`ProbeResult` timed from ``started`` (``time.perf_counter()``). A non-finite ``raw`` turns
    the result into an error (the probe cannot say anything); other non-finite numbers become None."""
    duration = time.perf_counter() - started
    if raw is not None and not math.isfinite(raw):
        return ProbeResult(
            name, kind, Verdict.ERROR, None, None, dict(evidence), f"non-finite raw value {raw}", duration_s=duration
        )

    def finite(v: float | None) -> float | None:
        return v if v is not None and math.isfinite(v) else None

    return ProbeResult(
        name=name,
        kind=kind,
        verdict=verdict,
        score=None if score is None else min(1.0, max(0.0, score)),
        raw=raw,
        evidence=dict(evidence),
        message=message,
        z_score=finite(z),
        base_value=finite(base_value),
        ft_value=finite(ft_value),
        duration_s=duration,
    )


def skipped(name: str, kind: str, reason: str, started: float | None = None) -> ProbeResult:
    """A skipped probe with its reason, timed from ``started`` when it did work before it knew."""
    duration = 0.0 if started is None else time.perf_counter() - started
    return ProbeResult(name, kind, Verdict.SKIP, None, None, {"reason": reason}, reason, duration_s=duration)


def errored(name: str, kind: str, exc: BaseException, started: float) -> ProbeResult:
    """A probe that raised: verdict error, the exception as the message."""
    return ProbeResult(
        name,
        kind,
        Verdict.ERROR,
        None,
        None,
        {"error": type(exc).__name__},
        f"{type(exc).__name__}: {exc}",
        duration_s=time.perf_counter() - started,
    )
