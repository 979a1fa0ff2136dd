"""``delta_kl``: how far the fine-tuned view's next-token distribution moved from the base's, after each
of the document's prompts (sway's A1 probe).

``raw`` is the mean divergence over the prompts, in nats — JS by default (bounded by ln 2), or KL(ft ‖ base)
(:mod:`learnerd.ml.divergence`). With null-adapter statistics the verdict is ``z >= assert_z_gte``
(default 3σ) and ``score = sigmoid(z / 3)``; without, ``raw >= assert_mean_gte`` and ``score = raw / ln 2``
(JS) or ``1 − e^−raw`` (KL). A zero divergence means the adapter changes nothing.

Null calibration (:mod:`learnerd.eval.probes.null_adapter`) measures the same divergence with noise adapters: by
default (``calibration = "sway"``) on sway's fixed :data:`SENTINEL_PROMPTS`, as sway 0.1.0 does, so the
z-scores compare with sway's reports; with ``calibration = "document"`` on the document's own prompts.
``calibration = "sway-exact"`` calibrates as "sway" and also completes each top-k's tail as sway does (over
the union of the two top-k, :func:`~learnerd.ml.divergence.union_aligned_probs`), so raw values, null
statistics and z-scores are sway's own numbers rather than the exact divergence.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from learnerd.eval.probes.common import (
    NotApplicable,
    ProbeOptions,
    ViewFactory,
    errored,
    result,
    sigmoid,
    skipped,
    z_score,
)
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.ml.divergence import LN2, divergence

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "delta_kl"
CATEGORY = "adherence"  # sway's score category


class Options(ProbeOptions):
    """``delta_kl``'s knobs (sway's ``DeltaKLSpec`` defaults)."""

    delta_divergence: Literal["js", "kl"] = "js"
    """the divergence measured: Jensen-Shannon or KL(ft ‖ base), nats"""
    assert_z_gte: float = 3.0
    """passes at this many null-adapter standard deviations above the null mean"""
    assert_mean_gte: float = 0.02
    """without a null calibration, passes at this mean divergence (nats)"""


SENTINEL_PROMPTS: tuple[str, ...] = (
    "The capital of",
    "Once upon a time",
    "An interesting fact is",
    "The next step is to",
)
"""The fixed prompts sway 0.1.0 calibrates ``delta_kl``'s null adapters on (``probes/base.py``
``SENTINEL_PROMPTS``), encoded as plain text, as sway's HF backend encodes prompts."""


def per_prompt(
    ctx: ProbeContext, ft_view: ViewFactory, prompt_ids: Sequence[Sequence[int]] | None = None
) -> list[float]:
    """The divergence after each prompt (the document's, or ``prompt_ids``), base against ``ft_view``.

    Raises:
        NotApplicable: the document gives no prompt.
        DivergenceError / NonFiniteLogitsError: a view's distribution is unusable.
    """
    if prompt_ids is None:
        if not ctx.inputs.prompts:
            raise NotApplicable("the document has no question or prose to prompt with")
        prompt_ids = [p.ids for p in ctx.inputs.prompts]
    top_k = ctx.options.top_k
    with ctx.backend.as_base() as base:
        base_dists = base.next_token_dists(prompt_ids, top_k)
    with ft_view() as ft:
        ft_dists = ft.next_token_dists(prompt_ids, top_k)
    kind = ctx.options.delta_divergence
    completion = ctx.options.top_k_completion
    return [divergence(b, f, kind, completion) for b, f in zip(base_dists, ft_dists, strict=True)]


def raw_value(ctx: ProbeContext, ft_view: ViewFactory) -> float:
    """The probe's raw metric (mean divergence, nats) with ``ft_view`` as the fine-tuned side: on the
    document's prompts, or — ``calibration = "sway"``, for a null adapter — on :data:`SENTINEL_PROMPTS`."""
    prompt_ids = None
    if ctx.options.sway_nulls:
        prompt_ids = [ctx.inputs.encoder.text_prompt(p) for p in SENTINEL_PROMPTS]
    return statistics.fmean(per_prompt(ctx, ft_view, prompt_ids))


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    try:
        values = per_prompt(ctx, ctx.backend.as_finetuned)
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc))
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
    opts, kind = ctx.options, ctx.options.delta_divergence
    raw = statistics.fmean(values)
    z = z_score(ctx, KIND, raw)
    if z is not None:
        passed = z >= opts.assert_z_gte
        score = sigmoid(z / 3.0)
        message = f"mean {kind}={raw:.4f} nats, z={z:+.2f}σ vs null ({'>=' if passed else '<'} {opts.assert_z_gte:g}σ)"
    else:
        passed = raw >= opts.assert_mean_gte
        score = raw / LN2 if kind == "js" else 1.0 - math.exp(-raw)
        message = (
            f"mean {kind}={raw:.4f} nats ({'>=' if passed else '<'} {opts.assert_mean_gte:g}; no null calibration)"
        )
    evidence = {
        "divergence_kind": kind,
        "per_prompt": values,
        "max": max(values),
        "num_prompts": len(values),
        "prompts": [p.text[:80] for p in ctx.inputs.prompts],
        "weight": 1.0,
    }
    if KIND in ctx.null_stats:
        evidence["null"] = dict(ctx.null_stats[KIND])
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return result(KIND, KIND, verdict, score=score, raw=raw, evidence=evidence, message=message, started=started, z=z)
