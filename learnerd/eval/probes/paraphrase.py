"""``paraphrase_invariance``: did the adapter learn what its document's questions ask, or their wording?
(sway 0.1.0's B2 probe, ``probes/paraphrase_invariance.py``: same statistics, verdicts and defaults.)

**Cases.** sway's probe scores the ``cases`` of its spec — ``(prompt, gold, paraphrases)`` — and a ``.dlm``
section carries no paraphrases of its own: sway's dlm bridge (``integrations/dlm/autogen.py``) builds the
cases from the document's instruction Q/A pairs, the first 6 in document order, each with the three
paraphrases of :data:`PARAPHRASES` (``_auto_paraphrases``: the question, stripped of trailing ``?``, ``.``
and spaces, in three fixed frames). learnerd does the same with the first ``paraphrase_cases`` distinct
pairs of the document (probe or not); a document without instruction Q/A pairs has no case: the probe is
skipped and says so.

**Scores.** A case's answer is scored after its question and after each paraphrase the way training
encodes a pair (:meth:`~learnerd.eval.inputs.Encoder.pair`: the chat template's assistant span), in nats per
token of that span. ``verbatim_lift`` is the fine-tuned minus the base log-likelihood after the question;
``paraphrase_lift`` the mean of the same after the paraphrases. ``raw`` is the mean verbatim lift over the
cases; ``generalization_ratio`` = mean paraphrase lift / mean verbatim lift (0 when the latter is within
1e-9 of 0).

**Verdict** (sway's): with null-adapter statistics, ``z`` of the mean verbatim lift passes at
``z >= paraphrase_assert_z_gte`` with ``score = sigmoid(z / 3)``. Without, by ``paraphrase_intent``:
``generalize`` (default; ``both`` alike) passes when the mean verbatim lift is at least
``paraphrase_min_verbatim_lift`` and the ratio at least ``paraphrase_min_generalization_ratio``, score the
mean of the two clipped ratios to their thresholds; ``memorize`` passes on the verbatim lift and a ratio at
most ``paraphrase_max_ratio_if_memorize``, score the verbatim lift over its threshold. As in sway's report,
``base_value`` holds the mean verbatim lift and ``ft_value`` the mean paraphrase lift.

Null calibration (:mod:`.null_adapter`): with ``calibration = "sway"`` on sway's two sentinel cases
(:data:`SENTINEL_CASES`, ``calibrate_spec``), scored as sway scores them — plain-text completions
(:meth:`~learnerd.eval.inputs.Encoder.completion`) per estimated token
(:func:`~learnerd.eval.inputs.token_estimate`) — so the null statistics are sway's; with ``"document"``
on the document's own cases.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from learnerd.eval.inputs import Scored, token_estimate
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

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "paraphrase_invariance"
CATEGORY = "attribution"  # sway's score category
PARAPHRASES: tuple[str, ...] = ("Could you explain: {}?", "I'd like to know — {}.", "Please describe: {}.")
"""The frames sway 0.1.0's dlm bridge paraphrases a question with (``_auto_paraphrases``)."""
SENTINEL_CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("The capital of France is", " Paris", ("What's the capital of France?", "Tell me about France's capital.")),
    ("Two plus two equals", " four", ("Sum of two and two:", "Add 2 and 2:")),
)
"""The ``(prompt, gold, paraphrases)`` sway 0.1.0 calibrates the probe's null adapters on
(``ParaphraseInvarianceProbe.calibrate_spec``)."""
PER_CASE_EVIDENCE = 8


class Options(ProbeOptions):
    """``paraphrase_invariance``'s knobs (sway's ``ParaphraseInvarianceSpec`` defaults and its bridge's case
    count, names prefixed ``paraphrase_``)."""

    paraphrase_cases: int = Field(6, ge=1)
    """the document's first N distinct Q/A pairs are the cases"""
    paraphrase_intent: Literal["generalize", "memorize", "both"] = "generalize"
    """what the uncalibrated verdict asks of the adapter"""
    paraphrase_min_verbatim_lift: float = 0.2
    """nats per token the answer must gain after its own question (uncalibrated verdict)"""
    paraphrase_min_generalization_ratio: float = 0.5
    """paraphrase lift / verbatim lift at least this (intent generalize)"""
    paraphrase_max_ratio_if_memorize: float = 0.5
    """paraphrase lift / verbatim lift at most this (intent memorize)"""
    paraphrase_assert_z_gte: float = 3.0
    """passes at this many null standard deviations above the null mean verbatim lift"""


@dataclass(frozen=True)
class Case:
    """One case, encoded: its answer after the question (``verbatim``) and after each paraphrase, and the
    number of tokens its log-likelihoods are divided by."""

    prompt: str
    verbatim: Scored
    paraphrases: tuple[Scored, ...]
    tokens: int


def paraphrased(question: str) -> tuple[str, ...]:
    """sway's paraphrases of ``question`` (:data:`PARAPHRASES`)."""
    stripped = question.rstrip("?. ")
    return tuple(frame.format(stripped) for frame in PARAPHRASES)


def document_cases(ctx: ProbeContext) -> list[Case]:
    """The document's first ``paraphrase_cases`` Q/A pairs with their paraphrases, encoded as training
    encodes a pair.

    Raises:
        NotApplicable: the document has no instruction Q/A pair.
    """
    pairs = ctx.inputs.pairs[: ctx.options.paraphrase_cases]
    if not pairs:
        raise NotApplicable("the document has no ::instruction:: Q/A pair to paraphrase")
    encoder, out = ctx.inputs.encoder, []
    for question, answer in pairs:
        verbatim = encoder.pair(question, answer)
        others = tuple(encoder.pair(p, answer) for p in paraphrased(question))
        out.append(Case(question, verbatim, others, len(verbatim.target)))
    return out


def sentinel_cases(ctx: ProbeContext) -> list[Case]:
    """:data:`SENTINEL_CASES` encoded as sway scores them: plain-text completions, per estimated token."""
    encoder = ctx.inputs.encoder
    return [
        Case(prompt, encoder.completion(prompt, gold), tuple(encoder.completion(p, gold) for p in others),
             token_estimate(gold))
        for prompt, gold, others in SENTINEL_CASES
    ]  # fmt: skip


def lifts(ctx: ProbeContext, ft_view: ViewFactory, cases: Sequence[Case]) -> list[tuple[float, float]]:
    """``(verbatim_lift, paraphrase_lift)`` of each case in nats per token, ``ft_view`` as the fine-tuned
    side; every scored text in one batched call per view.

    Raises:
        NonFiniteLogitsError: a view's logits are unusable.
    """
    flat = [(s.context, s.target) for case in cases for s in (case.verbatim, *case.paraphrases)]
    with ctx.backend.as_base() as base:
        base_lp = base.logprobs(flat)
    with ft_view() as ft:
        ft_lp = ft.logprobs(flat)
    out, at = [], 0
    for case in cases:
        end = at + 1 + len(case.paraphrases)
        lift = [(f - b) / case.tokens for b, f in zip(base_lp[at:end], ft_lp[at:end], strict=True)]
        out.append((lift[0], statistics.fmean(lift[1:])))
        at = end
    return out


def raw_value(ctx: ProbeContext, ft_view: ViewFactory) -> float:
    """The mean verbatim lift with ``ft_view`` as the fine-tuned side: on :func:`sentinel_cases` with
    ``calibration = "sway"``, on :func:`document_cases` with ``"document"``."""
    cases = sentinel_cases(ctx) if ctx.options.sway_nulls else document_cases(ctx)
    return statistics.fmean(verbatim for verbatim, _ in lifts(ctx, ft_view, cases))


def _uncalibrated(ctx: ProbeContext, verbatim: float, ratio: float) -> tuple[bool, float, str]:
    """sway's intent-aware verdict (``_decide``): ``(passed, score, intent note)``."""
    opts = ctx.options
    lift_part = min(1.0, max(0.0, verbatim / max(opts.paraphrase_min_verbatim_lift, 1e-6)))
    if opts.paraphrase_intent == "memorize":
        passed = verbatim >= opts.paraphrase_min_verbatim_lift and ratio <= opts.paraphrase_max_ratio_if_memorize
        return passed, lift_part, "intent=memorize"
    passed = verbatim >= opts.paraphrase_min_verbatim_lift and ratio >= opts.paraphrase_min_generalization_ratio
    ratio_part = min(1.0, max(0.0, ratio / max(opts.paraphrase_min_generalization_ratio, 1e-6)))
    return passed, 0.5 * ratio_part + 0.5 * lift_part, f"intent={opts.paraphrase_intent}"


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    try:
        cases = document_cases(ctx)
        values = lifts(ctx, ctx.backend.as_finetuned, cases)
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc))
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
    verbatim = statistics.fmean(v for v, _ in values)
    paraphrase = statistics.fmean(p for _, p in values)
    ratio = paraphrase / verbatim if abs(verbatim) > 1e-9 else 0.0
    z = z_score(ctx, KIND, verbatim)
    stated = f"verb={verbatim:+.3f}, para={paraphrase:+.3f}, ratio={ratio:.2f}"
    if z is not None:
        passed, score = z >= ctx.options.paraphrase_assert_z_gte, sigmoid(z / 3.0)
        message = f"{stated}, z={z:+.2f}σ vs null"
    else:
        passed, score, note = _uncalibrated(ctx, verbatim, ratio)
        message = f"{stated} — {note} (no calibration for {KIND})"
    per_case: list[dict[str, Any]] = [
        {"prompt": case.prompt[:80], "verbatim_lift": v, "paraphrase_lift": p}
        for case, (v, p) in zip(cases, values, strict=True)
    ]
    evidence = {
        "verbatim_lift_mean": verbatim,
        "paraphrase_lift_mean": paraphrase,
        "generalization_ratio": ratio,
        "intent": ctx.options.paraphrase_intent,
        "per_case": per_case[:PER_CASE_EVIDENCE],
        "num_cases": len(cases),
        "weight": 1.0,
    }
    if KIND in ctx.null_stats:
        evidence["null"] = dict(ctx.null_stats[KIND])
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return result(
        KIND, KIND, verdict, score=score, raw=verbatim, evidence=evidence, message=message, started=started, z=z,
        base_value=verbatim, ft_value=paraphrase,
    )  # fmt: skip
