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
from typing import Any

from learnerd.config import EvaluationSettings
from learnerd.eval.backend import DifferentialBackend, View
from learnerd.eval.inputs import DocumentInputs
from learnerd.eval.report import ProbeResult, Verdict

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

CATEGORY: Mapping[str, str] = {
    "probe_recall": "adherence",
    "delta_kl": "adherence",
    "multi_turn_coherence_decay": "adherence",
    "section_internalization": "attribution",
    "null_adapter": "baseline",
    "preflight": "baseline",
}
"""The score category of each probe kind (sway's categories)."""

ViewFactory = Callable[[], AbstractContextManager[View]]
"""Opens the view a probe measures as its fine-tuned side: the adapter, or a null adapter."""


class NotApplicable(Exception):
    """The probe cannot run on this document or base (the message is the reason); it is skipped."""


@dataclass(frozen=True)
class EvalOptions:
    """The knobs of an evaluation (defaults follow sway's where it has one).

    Divergences are in nats; ``top_k`` tokens per next-token distribution.
    """

    top_k: int = 256
    max_prompts: int = 8
    harvest_tag: str = "auto-harvest"
    # probe_recall
    min_similarity: float = 0.9
    max_answer_tokens: int = 128
    # delta_kl
    delta_divergence: str = "js"
    assert_z_gte: float = 3.0
    assert_mean_gte: float = 0.02
    # multi_turn_coherence_decay
    max_turns: int = 4
    dialogue_prompts: int = 2
    turn_max_new_tokens: int = 48
    half_life_target: float = 2.0
    follow_ups: tuple[str, ...] = FOLLOW_UPS
    # section_internalization
    section_threshold: float = 0.05
    passing_section_frac: float = 0.5
    leak_sections: int = 8
    # null_adapter
    null_runs: int = 3
    null_init_scale: float = 0.02
    null_seed_base: int = 1000

    def __post_init__(self) -> None:
        if not 2 <= self.max_turns <= 8:
            raise ValueError(f"max_turns must be in 2..8, not {self.max_turns}")
        if self.delta_divergence not in ("js", "kl"):
            raise ValueError(f"delta_divergence must be js or kl, not {self.delta_divergence!r}")
        if not 0.0 <= self.min_similarity <= 1.0:
            raise ValueError("min_similarity must be in [0, 1]")
        if self.null_runs < 0 or self.top_k < 1 or self.max_prompts < 1 or not self.follow_ups:
            raise ValueError("need null_runs >= 0, top_k >= 1, max_prompts >= 1 and at least one follow-up")

    @classmethod
    def from_settings(cls, settings: EvaluationSettings) -> EvalOptions:
        """The options the ``[evaluation]`` config section sets; defaults for the rest."""
        return cls(
            harvest_tag=settings.harvest_tag,
            null_runs=settings.null_runs,
            max_prompts=settings.max_prompts,
            max_turns=settings.max_turns,
            half_life_target=settings.half_life_target,
        )


@dataclass
class ProbeContext:
    """What a probe reads: the backend, the document's encoded inputs, the options, and the null-adapter
    statistics per probe kind (``{"mean", "std", "n"}``) once calibration ran."""

    backend: DifferentialBackend
    inputs: DocumentInputs
    options: EvalOptions = field(default_factory=EvalOptions)
    null_stats: dict[str, dict[str, float]] = field(default_factory=dict)


def z_score(ctx: ProbeContext, kind: str, raw: float) -> float | None:
    """Standard deviations of ``raw`` above the null-adapter mean of ``kind``, or None uncalibrated."""
    null = ctx.null_stats.get(kind)
    if null is None or not null.get("std", 0.0) > 0.0:
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
