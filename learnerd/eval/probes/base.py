"""What every probe shares: the options of a run, the context a probe reads, and how a result is built.

A probe is a function ``run(ctx) -> ProbeResult | list[ProbeResult]``. A probe that supports null-adapter
calibration also offers ``raw_value(ctx, view_factory) -> float``: its raw metric with the fine-tuned side
replaced by another view (see :mod:`learnerd.eval.probes.null_adapter`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field

from learnerd.eval.backend import DifferentialBackend, View
from learnerd.eval.inputs import DocumentInputs
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.eval.settings import EvaluationSettings

FOLLOW_UPS: tuple[str, ...] = (
    "Please go on.",
    "Say more about that.",
    "Why is that?",
    "Can you give an example?",
    "What follows from that?",
    "Anything else?",
    "Summarise what you said.",
)
"""The user turns the multi-turn probe cycles through after the first answer."""

ViewFactory = Callable[[], AbstractContextManager[View]]
"""Opens the view a probe measures as its fine-tuned side: the adapter, or a null adapter."""


class NotApplicable(Exception):
    """The probe cannot run on this document or base (the message is the reason); it is skipped."""


class EvalOptions(EvaluationSettings):
    """The knobs of an evaluation: the ``[evaluation]`` settings plus the probes' own (defaults follow
    sway's where it has one). Validated by pydantic like the config (a value out of range raises
    ``pydantic.ValidationError``, a ``ValueError``).

    Divergences are in nats; ``top_k`` tokens per next-token distribution.
    """

    model_config = ConfigDict(frozen=True)

    top_k: int = Field(256, ge=1)
    # probe_recall
    min_similarity: float = Field(0.9, ge=0, le=1)
    max_answer_tokens: int = Field(128, ge=1)
    # delta_kl
    delta_divergence: Literal["js", "kl"] = "js"
    assert_z_gte: float = 3.0
    assert_mean_gte: float = 0.02
    # multi_turn_coherence_decay
    dialogue_prompts: int = Field(2, ge=1)
    turn_max_new_tokens: int = Field(48, ge=1)
    follow_ups: tuple[str, ...] = Field(FOLLOW_UPS, min_length=1)
    # section_internalization
    section_threshold: float = 0.05
    passing_section_frac: float = Field(0.5, ge=0, le=1)
    leak_sections: int = Field(8, ge=0)
    # null_adapter
    null_init_scale: float = Field(0.02, gt=0)
    null_seed_base: int = 1000

    @classmethod
    def from_settings(cls, settings: EvaluationSettings, **overrides: Any) -> EvalOptions:
        """The options the ``[evaluation]`` config section sets (with ``overrides``); defaults for the rest."""
        return cls.model_validate({**settings.model_dump(), **overrides})


@dataclass
class ProbeContext:
    """What a probe reads: the backend, the document's encoded inputs, the options, and the null-adapter
    statistics per probe kind (``{"mean", "std", "n", "degenerate"}``) once calibration ran.

    ``progress`` is called with a short description after each step of work (:func:`learnerd.eval.suite.total_steps`
    of them in a whole evaluation); it is where a progress bar or a log event hooks in.
    """

    backend: DifferentialBackend
    inputs: DocumentInputs
    options: EvalOptions = field(default_factory=EvalOptions)
    null_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    progress: Callable[[str], None] = field(default_factory=lambda: _no_progress)

    def step(self, description: str) -> None:
        """One step of work done: report it, then stop here if the evaluation was cancelled.

        Raises:
            EvaluationCancelled: the backend's cancel event is set.
        """
        self.progress(description)
        self.backend.check_cancelled()


def _no_progress(description: str) -> None:
    return None


def z_score(ctx: ProbeContext, kind: str, raw: float) -> float | None:
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


def skipped(name: str, kind: str, reason: str) -> ProbeResult:
    """A skipped probe with its reason."""
    return ProbeResult(name, kind, Verdict.SKIP, None, None, {"reason": reason}, reason)


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
