"""``section_internalization``: did the adapter learn each section itself, beyond a lift it gives to any
text? (sway's B1 "section internalization score").

For each instruction and prose section ``s``, with ``NLL`` the mean negative log-likelihood per token
(nats) of a scored continuation and ``lift = (NLL_base − NLL_ft) / NLL_base``:

* ``own_lift``: the lift on the section's own text — its answers after its questions (at most 8 pairs),
  or its prose;
* ``leak_lift``: the lift on *other sections'* text (each stands in by its first answer or its prose),
  scored in this section's context — after this section's first question, or from the start of the
  text for prose. Up to ``leak_sections`` others, taken cyclically after ``s`` in document order;
* ``effective_sis = own_lift − leak_lift``; the section passes when it is at least ``section_threshold``.

sway measures the leak of an instruction section on the other sections' own Q/A; a document whose
sections are all learned then scores ≈ 0 everywhere (each section is lifted as much as every other).
Scoring other sections' answers after *this* section's question asks instead whether the adapter learned
this section's answer for this question, rather than raising every answer of the document — which tells a
learned section from an unlearned one in both cases. For prose both definitions coincide.

``raw`` is the mean ``effective_sis`` (null-calibrated); the verdict passes when the fraction of passing
sections reaches ``passing_section_frac``; ``score`` is that fraction. Evidence ``per_section[]`` carries
dlm section ids and ``passed`` as real sway reports do, so ``learnerd harvest`` lists undertrained sections.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from learnerd.eval.backend import View
from learnerd.eval.inputs import Scored
from learnerd.eval.probes.common import (
    NotApplicable,
    ProbeOptions,
    ViewFactory,
    errored,
    result,
    skipped,
    z_score,
)
from learnerd.eval.report import ProbeResult, Verdict

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "section_internalization"
CATEGORY = "attribution"  # sway's score category


class Options(ProbeOptions):
    """``section_internalization``'s knobs."""

    section_threshold: float = 0.05
    """a section passes at this effective lift (own lift minus leak lift)"""
    passing_section_frac: float = Field(0.5, ge=0, le=1)
    """the probe passes when this fraction of the sections passes"""
    leak_sections: int = Field(8, ge=0)
    """other sections scored in each section's context for its leak lift"""


def _items(ctx: ProbeContext) -> list[tuple[tuple[Scored, ...], tuple[Scored, ...]]]:
    sections, encoder = ctx.inputs.sections, ctx.inputs.encoder
    if len(sections) < 2:
        raise NotApplicable(f"needs at least two instruction or prose sections, the document has {len(sections)}")
    n, k = len(sections), min(len(sections) - 1, ctx.options.leak_sections)
    out = []
    for i, s in enumerate(sections):
        others = [sections[(i + j) % n] for j in range(1, k + 1)]
        leak = tuple(
            encoder.pair(s.question, o.text) if s.question is not None else encoder.text(o.text) for o in others
        )
        out.append((s.own, leak))
    return out


def _nlls(view: View, items: Sequence[tuple[tuple[Scored, ...], tuple[Scored, ...]]]) -> list[tuple[float, float]]:
    """``(own NLL, leak NLL)`` per section in nats per token; every scored text in one batched call."""
    flat = [s for own, leak in items for s in (*own, *leak)]
    logprobs = view.logprobs([(s.context, s.target) for s in flat])
    values = [-lp / len(s.target) for s, lp in zip(flat, logprobs, strict=True)]
    out, at = [], 0
    for own, leak in items:
        middle, end = at + len(own), at + len(own) + len(leak)
        out.append((statistics.fmean(values[at:middle]), statistics.fmean(values[middle:end])))
        at = end
    return out


def _lift(base_nll: float, ft_nll: float) -> float:
    return (base_nll - ft_nll) / base_nll if base_nll > 0.0 else base_nll - ft_nll


def per_section(ctx: ProbeContext, ft_view: ViewFactory) -> list[dict[str, Any]]:
    """One entry per section (see the module docstring), ``ft_view`` as the fine-tuned side.

    Raises:
        NotApplicable: fewer than two sections.
    """
    items = _items(ctx)
    with ctx.backend.as_base() as base:
        base_nll = _nlls(base, items)
    with ft_view() as ft:
        ft_nll = _nlls(ft, items)
    out = []
    for s, (b_own, b_leak), (f_own, f_leak) in zip(ctx.inputs.sections, base_nll, ft_nll, strict=True):
        own, leak = _lift(b_own, f_own), _lift(b_leak, f_leak)
        effective = own - leak
        out.append(
            {
                "section_id": s.section_id,
                "kind": s.kind,
                "tag": s.tag,
                "base_nll": b_own,
                "ft_nll": f_own,
                "own_lift": own,
                "leak_lift": leak,
                "effective_sis": effective,
                "passed": effective >= ctx.options.section_threshold,
            }
        )
    return out


def raw_value(ctx: ProbeContext, ft_view: ViewFactory) -> float:
    """The mean ``effective_sis`` with ``ft_view`` as the fine-tuned side."""
    return statistics.fmean(e["effective_sis"] for e in per_section(ctx, ft_view))


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    try:
        entries = per_section(ctx, ctx.backend.as_finetuned)
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc))
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
    opts = ctx.options
    passing = sum(e["passed"] for e in entries)
    frac = passing / len(entries)
    raw = statistics.fmean(e["effective_sis"] for e in entries)
    z = z_score(ctx, KIND, raw)
    verdict = Verdict.PASS if frac >= opts.passing_section_frac else Verdict.FAIL
    message = f"{passing}/{len(entries)} sections with effective_sis >= {opts.section_threshold:g} (mean {raw:+.3f})"
    if z is not None:
        message += f", z={z:+.2f}σ vs null"
    evidence = {
        "per_section": entries,
        "num_sections": len(entries),
        "passing_frac": frac,
        "per_section_threshold": opts.section_threshold,
        "weight": 1.0,
    }
    return result(KIND, KIND, verdict, score=frac, raw=raw, evidence=evidence, message=message, started=started, z=z)
