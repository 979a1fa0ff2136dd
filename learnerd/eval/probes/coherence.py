"""``multi_turn_coherence_decay``: does the adapter's influence survive a dialogue, or fade turn by turn?

After sway's probe of the same name. For each of the first ``dialogue_prompts`` questions of the document (all
dialogues in one batch per turn), the fine-tuned view rolls a dialogue through the chat template: it answers
the question greedily, then a follow-up (cycled from ``follow_ups``) is asked, and so on up to ``max_turns``
user turns. At each turn ``t = 2..max_turns``, before the model answers, the divergence KL(ft ‖ base) of the
next-token distributions is measured on the same history (both views see the fine-tuned model's own earlier
answers); ``calibration = "sway-exact"`` completes the top-k tails as sway does. The per-turn means are
fitted with :func:`~learnerd.eval.half_life.fit_half_life`; ``raw`` is the half-life in turns.

Verdicts: ``ok`` passes when the half-life is at least ``half_life_target`` (default 2 turns; score
``half_life / target`` capped at 1); ``stable`` passes (score 1, the saturated half-life); ``non_monotonic``
warns (score 0.5); ``degenerate`` fails (score 0: a likely no-op adapter). A base without a chat template
skips the probe. No null calibration: a noise adapter's dialogue has no coherence to decay (sway's reasoning).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from pydantic import Field

from learnerd.eval.backend import View
from learnerd.eval.half_life import fit_half_life, sparkline
from learnerd.eval.probes.common import NotApplicable, ProbeOptions, errored, result, skipped
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.ml.divergence import divergence
from learnerd.ml.rows import ChatMessage

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "multi_turn_coherence_decay"
CATEGORY = "adherence"  # sway's score category
FOLLOW_UPS: tuple[str, ...] = (
    "Please go on.",
    "Say more about that.",
    "Why is that?",
    "Can you give an example?",
    "What follows from that?",
    "Anything else?",
    "Summarise what you said.",
)
"""The user turns the probe cycles through after the first answer."""


class Options(ProbeOptions):
    """``multi_turn_coherence_decay``'s knobs (``max_turns`` and ``half_life_target`` are ``[evaluation]``
    settings)."""

    dialogue_prompts: int = Field(2, ge=1)
    """dialogues rolled, one per question of the document"""
    turn_max_new_tokens: int = Field(48, ge=1)
    """new tokens of each answer in a dialogue at most"""
    follow_ups: tuple[str, ...] = Field(FOLLOW_UPS, min_length=1)
    """the user turns after the first answer, cycled"""


NO_CHAT_TEMPLATE = "the base model's tokenizer has no chat template; a multi-turn dialogue needs one"


def per_turn(ctx: ProbeContext) -> tuple[list[float], int]:
    """Mean KL(ft ‖ base) in nats at turns 2..max_turns, and the number of dialogues rolled.

    Raises:
        NotApplicable: no chat template, or the document has no question to open a dialogue with.
    """
    encoder, backend, opts = ctx.inputs.encoder, ctx.backend, ctx.options
    completion = opts.top_k_completion
    if not encoder.chat:
        raise NotApplicable(NO_CHAT_TEMPLATE)
    questions = [p.text for p in ctx.inputs.prompts if p.source != "prose"][: opts.dialogue_prompts]
    if not questions:
        raise NotApplicable("the document has no question to open a dialogue with")
    curves: list[list[float]] = []
    dialogues = [[ChatMessage("user", q)] for q in questions]

    def reply(ft: View, prompts: list[tuple[int, ...]]) -> None:
        answers = ft.generate_many(prompts, [opts.turn_max_new_tokens] * len(prompts))
        for messages, ids in zip(dialogues, answers, strict=True):
            messages.append(ChatMessage("assistant", encoder.decode(ids)))

    with backend.as_finetuned() as ft:
        reply(ft, [encoder.prompt(q) for q in questions])
    for i, turn in enumerate(range(2, opts.max_turns + 1)):
        for messages in dialogues:
            messages.append(ChatMessage("user", opts.follow_ups[i % len(opts.follow_ups)]))
        prompts = [encoder.dialogue(messages) for messages in dialogues]
        with backend.as_base() as base:
            base_dists = base.next_token_dists(prompts, opts.top_k)
        with backend.as_finetuned() as ft:
            ft_dists = ft.next_token_dists(prompts, opts.top_k)
            curves.append([divergence(b, f, "kl", completion) for b, f in zip(base_dists, ft_dists, strict=True)])
            if turn < opts.max_turns:
                reply(ft, prompts)
    return [statistics.fmean(c) for c in curves], len(questions)


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    opts = ctx.options
    try:
        curve, dialogues = per_turn(ctx)
        turns = list(range(2, opts.max_turns + 1))
        fit = fit_half_life(turns, curve, max_turns=opts.max_turns)
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc))
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
    spark = sparkline(curve)
    target = opts.half_life_target
    if fit.status == "non_monotonic":
        verdict, score, message = Verdict.WARN, 0.5, f"KL grows over the dialogue (non-monotonic) {spark}"
    elif fit.status == "degenerate":
        verdict, score, message = Verdict.FAIL, 0.0, f"KL is zero at every turn: the adapter changes nothing {spark}"
    elif fit.status == "stable":
        verdict, score = Verdict.PASS, 1.0
        message = f"stable over {opts.max_turns} turns (half-life saturated at {fit.half_life:g}) {spark}"
    else:
        assert fit.half_life is not None
        passed = fit.half_life >= target
        verdict, score = (Verdict.PASS if passed else Verdict.FAIL), min(1.0, fit.half_life / target)
        message = f"half-life {fit.half_life:.2f} turns ({'>=' if passed else '<'} {target:g}) {spark}"
    evidence = {
        "per_turn_kls": curve,
        "turns_axis": turns,
        "fit_status": fit.status,
        "fit_a": fit.a,
        "fit_b": fit.b,
        "half_life_turns": fit.half_life,
        "half_life_target": target,
        "divergence_kind": "kl",
        "max_turns": opts.max_turns,
        "num_prompts": dialogues,
        "sparkline": spark,
        "weight": 1.0,
    }
    return result(
        KIND, KIND, verdict, score=score, raw=fit.half_life, evidence=evidence, message=message, started=started
    )
