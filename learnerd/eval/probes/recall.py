"""``probe_recall``: does the adapter answer the document's ``### Q !probe`` questions with their answers?

One result per distinct probe pair (named :func:`~learnerd.eval.inputs.probe_name`), so each failing
probe carries its own ``evidence.prompt`` / ``evidence.reference`` — what ``learnerd harvest`` reads. The
fine-tuned view answers greedily (at most the reference's token count + 8 new tokens); the base view
answers the same way, for contrast. Each view answers all probes in batches; a probe's ``duration_s`` is
its share of the batches' time. Texts are compared after collapsing whitespace: an exact match
passes, and so does a character-level similarity (``difflib.SequenceMatcher.ratio``, 2·matches / total
length) of at least ``min_similarity``.

Evidence: ``prompt``, ``reference``, ``generated``, ``base_generated``, ``exact_match``, ``similarity``,
``base_similarity``, ``section_id``, ``harvested``, ``weight`` (``1 / number of probes``, so all recall
results together weigh as one probe in the score); a failing probe adds ``confidence`` = 1 − similarity,
how far its answer is from the reference (harvest's ``--min-confidence`` filters near misses with it).
``score`` and ``raw`` are the similarity (1 for an exact match).
"""

from __future__ import annotations

import dataclasses
import difflib
import time
from typing import TYPE_CHECKING

from pydantic import Field

from learnerd.eval.inputs import ProbePair
from learnerd.eval.probes.common import ProbeOptions, errored, result, skipped
from learnerd.eval.report import ProbeResult, Report, Verdict

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "probe_recall"
CATEGORY = "adherence"  # sway's score category
ANSWER_SLACK_TOKENS = 8


class Options(ProbeOptions):
    """``probe_recall``'s knobs."""

    min_similarity: float = Field(0.9, ge=0, le=1)
    """an answer passes at this character-level similarity to the reference (or an exact match)"""
    max_answer_tokens: int = Field(128, ge=1)
    """new tokens of an answer at most (else the reference's length + 8)"""


def normalize(text: str) -> str:
    """Whitespace collapsed to single spaces, ends stripped."""
    return " ".join(text.split())


def exact_match(generated: str, reference: str) -> bool:
    """The texts are equal once whitespace is collapsed (:func:`normalize`)."""
    return normalize(generated) == normalize(reference)


def judged(report: Report) -> list[ProbeResult]:
    """``report``'s recall results that judged an answer (pass or fail: not skipped, not errored), in report
    order — what the gate pairs and the summaries count."""
    return [p for p in report.probes if p.kind == KIND and p.verdict in (Verdict.PASS, Verdict.FAIL)]


def answer_budget(ctx: ProbeContext, question: str, answer: str) -> int:
    """New tokens a greedy answer to ``question`` may take: the reference ``answer``'s token count +
    :data:`ANSWER_SLACK_TOKENS`, at most ``max_answer_tokens``."""
    reference_tokens = len(ctx.inputs.encoder.pair(question, answer).target)
    return min(ctx.options.max_answer_tokens, reference_tokens + ANSWER_SLACK_TOKENS)


def similarity(a: str, b: str) -> float:
    """Character-level similarity of the normalized texts in [0, 1] (1: identical)."""
    return difflib.SequenceMatcher(None, normalize(a), normalize(b), autojunk=False).ratio()


def run(ctx: ProbeContext) -> list[ProbeResult]:
    """One result per distinct probe pair; a single skipped result when the document has none. The
    answers of each view are generated in batches (:meth:`~learnerd.eval.backend.View.generate_many`)."""
    if not ctx.inputs.probes:
        return [skipped(KIND, KIND, "the document has no ### Q !probe pairs")]
    weight = 1.0 / len(ctx.inputs.probes)
    encoder, backend = ctx.inputs.encoder, ctx.backend
    started = time.perf_counter()
    out: dict[str, ProbeResult] = {}
    asks: list[tuple[ProbePair, tuple[int, ...], int]] = []
    for probe in ctx.inputs.probes:
        try:
            asks.append((probe, encoder.prompt(probe.question), answer_budget(ctx, probe.question, probe.answer)))
        except Exception as exc:  # one broken probe must not sink the others
            out[probe.name] = errored(probe.name, KIND, exc, started)
    prompts, budgets = [a[1] for a in asks], [a[2] for a in asks]
    answers: dict[str, list[str]] = {}
    try:
        for view, name in ((backend.as_finetuned, "ft"), (backend.as_base, "base")):
            with view() as v:
                answers[name] = [encoder.decode(ids) for ids in v.generate_many(prompts, budgets)]
    except Exception as exc:
        for probe, _, _ in asks:
            out[probe.name] = errored(probe.name, KIND, exc, started)
        return [out[p.name] for p in ctx.inputs.probes]
    for (probe, _, _), generated, base_generated in zip(asks, answers["ft"], answers["base"], strict=True):
        out[probe.name] = _judge(ctx, probe, generated, base_generated, weight, started, len(asks))
    return [out[p.name] for p in ctx.inputs.probes]


def _judge(
    ctx: ProbeContext, probe: ProbePair, generated: str, base_generated: str, weight: float, started: float, n: int
) -> ProbeResult:
    exact = exact_match(generated, probe.answer)
    sim = 1.0 if exact else similarity(generated, probe.answer)
    base_sim = similarity(base_generated, probe.answer)
    passed = exact or sim >= ctx.options.min_similarity
    evidence = {
        "prompt": probe.question,
        "reference": probe.answer,
        "generated": generated,
        "base_generated": base_generated,
        "exact_match": exact,
        "similarity": sim,
        "base_similarity": base_sim,
        "section_id": probe.section_id,
        "harvested": probe.harvested,
        "weight": weight,
    }
    if passed:
        message = "exact match" if exact else f"similarity {sim:.2f} >= {ctx.options.min_similarity:.2f}"
    else:
        evidence["confidence"] = 1.0 - sim
        message = f"answered {_clip(generated)!r}, expected {_clip(probe.answer)!r} (similarity {sim:.2f})"
    verdict = Verdict.PASS if passed else Verdict.FAIL
    result_ = result(
        probe.name, KIND, verdict, score=sim, raw=sim, evidence=evidence, message=message, started=started,
        base_value=base_sim, ft_value=sim,
    )  # fmt: skip
    return dataclasses.replace(result_, duration_s=result_.duration_s / n)  # the batch's time, shared


def _clip(text: str, limit: int = 40) -> str:
    text = normalize(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
