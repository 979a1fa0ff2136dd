"""``multi_turn_coherence_decay``: does the adapter's influence survive a dialogue, or fade turn by turn?

After the seed's probe of this name (sway 0.1.0 ships none; its ``prompt_collapse`` fits the same
exponential over context length instead of turns). A dialogue chains the document's own questions, as a
person asks a copilot one thing after another. Of ``k = min(dialogue_prompts, pairs)`` of the document's Q/A
pairs, spread evenly over it in its order (:func:`spread`: a document's first section is often one kind of task),
dialogue ``d`` (``0..k-1``) asks the ``(d + t - 1) mod k``-th of them at user turn ``t``, up to ``max_turns`` user
turns — a Latin square: every turn asks the same ``k`` questions, so the per-turn means differ by the
depth of the dialogue, not by which questions were asked; with ``k >= max_turns`` (the defaults: 10 and 4) no
dialogue asks a question twice. Each turn is answered greedily as served (at most the reference's token
count + 8 new tokens, ``max_answer_tokens`` at most): by the fine-tuned view, or by the base when the router
(:attr:`~learnerd.eval.probes.base.ProbeContext.route`) gives it the turn's question, as the endpoint routes the
last user message; and under the retrieved examples the endpoint quotes with that message
(:attr:`~learnerd.eval.probes.base.ProbeContext.quote`, ``[serve] rag_k`` of the document's learned examples,
:func:`learnerd.ml.retrieved_examples.with_examples`; :func:`learnerd.ml.router.served_quotes`: the adapter all
``rag_k``, the base the nearest at or above the routing threshold, and a turn it answers quoted is decoded with
context-aware decoding at :attr:`~learnerd.eval.probes.base.ProbeContext.context_alpha` against the same prompt without
them, as the endpoint decodes it), the history itself plain, as a client sends it again at each request. At each turn
``t = 2..max_turns``, before the model answers, the divergence KL(ft ‖ base) of the next-token distributions is measured
on the plain history (both views see the fine-tuned model's own earlier answers); ``calibration = "sway-exact"``
completes the top-k tails as sway does. The per-turn means are fitted with
:func:`~learnerd.eval.half_life.fit_half_life`; ``raw`` is the half-life in turns. ``evidence.answered_per_turn[t - 1]``
counts the dialogues whose answer at turn ``t`` equals its reference (whitespace collapsed): whether the served system
still answers at turn 3; ``evidence.routed_to_base`` counts the turns the base answered, ``evidence.quoted_turns`` those
answered under retrieved examples, and ``evidence.adapter_alone.answered_per_turn`` the same counts when the adapter
answers every turn with nothing quoted on ``dialogue_alone_prompts`` dialogues (4 by default; rolled only when the
served dialogue routed a turn to the base or quoted one, else the served ones are the adapter's).

Why the document's questions, not generic follow-ups ("Please go on."): a generic follow-up asks for
something no document teaches, and an adapter that keeps the base's abilities (``calibration_drift``,
``answer_retention``) answers it as the base does by design — the divergence falls, and the probe read the
retention it asked for as decay. The document's questions are where the adapter should differ from the
base at every turn (docs/benchmarks.md, "Multi-turn rows and the dialogue probe", has both measured).

Verdicts: ``ok`` passes when the half-life is at least ``half_life_target`` (default 2 turns; score
``half_life / target`` capped at 1); ``stable`` passes (score 1, the saturated half-life); ``non_monotonic``
warns (score 0.5); ``degenerate`` fails (score 0: a likely no-op adapter). Whatever the fit, the probe fails
when a later turn answers more than one dialogue fewer than turn 1 (the gate's tolerance on small sets): a
divergence that lasts is no use when the answers behind it are wrong (score at most the fraction kept, the
later turns' fewest answers over turn 1's). A base without a chat template skips the probe, and so does a
document without a Q/A pair. No null calibration: a noise adapter's dialogue has no coherence to decay
(sway's reasoning for ``prompt_collapse``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field

from learnerd.eval.half_life import fit_half_life, sparkline
from learnerd.eval.probes.common import NotApplicable, ProbeOptions, errored, result, skipped
from learnerd.eval.probes.recall import answer_budget, exact_match
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.ml.divergence import divergence
from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.router import no_quotes
from learnerd.ml.rows import ChatMessage

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "multi_turn_coherence_decay"
CATEGORY = "adherence"  # sway's score category


class Options(ProbeOptions):
    """``multi_turn_coherence_decay``'s knobs (``max_turns`` and ``half_life_target`` are ``[evaluation]``
    settings)."""

    dialogue_prompts: int = Field(10, ge=1)
    """dialogues rolled as served (``k``): each opens with one of ``k`` of the document's Q/A pairs spread evenly
    over it and asks the others in turn; the gate's ``dialogue_answers`` reads their answers (10: a later turn may
    miss one, docs/evaluation.md gives the rule's pass probabilities)"""
    dialogue_alone_prompts: int = Field(4, ge=1)
    """dialogues the adapter alone rolls (reported beside the served ones, not gated): a smaller sample, spread
    over the document the same way, as ``answer_retention`` estimates the adapter alone from a sample"""


NO_CHAT_TEMPLATE = "the base model's tokenizer has no chat template; a multi-turn dialogue needs one"


@dataclass(frozen=True)
class Dialogues:
    """The probe's measurements: ``kls[i]`` the mean KL(ft ‖ base) in nats before the answer at turn
    ``i + 2``; ``answered[i]`` how many of the ``count`` dialogues answered turn ``i + 1`` exactly; ``by_base``
    the turns the base answered (routed to it); ``quoted`` the turns answered under retrieved examples."""

    kls: list[float]
    answered: list[int]
    count: int
    by_base: int = 0
    quoted: int = 0


def spread(n: int, k: int) -> list[int]:
    """The ``k`` of ``n`` pairs the dialogues ask (``0 < k <= n``): indices ``floor(i·n/k)`` for ``i < k``, spread
    evenly over the document in its order (all of them when ``k == n``), so the dialogues sample the whole document
    rather than its first section."""
    return [i * n // k for i in range(k)]


def per_turn(ctx: ProbeContext, *, served: bool = True, count: int | None = None) -> Dialogues:
    """Roll the dialogues (see the module docstring; ``k = min(count, pairs)``, ``count`` by default the
    ``dialogue_prompts`` option) and measure them: each turn answered as served (the turn's question routed by
    :attr:`~learnerd.eval.probes.base.ProbeContext.route`, as the endpoint routes the last user message), or with
    ``served`` False by the adapter alone.

    Raises:
        NotApplicable: no chat template, or the document has no Q/A pair to open a dialogue with.
    """
    encoder, backend, opts = ctx.inputs.encoder, ctx.backend, ctx.options
    completion = opts.top_k_completion
    if not encoder.chat:
        raise NotApplicable(NO_CHAT_TEMPLATE)
    pairs = ctx.inputs.pairs
    if not pairs:
        raise NotApplicable("the document has no Q/A pair to open a dialogue with")
    k = min(opts.dialogue_prompts if count is None else count, len(pairs))
    pairs = tuple(pairs[i] for i in spread(len(pairs), k))
    starts = range(k)
    budgets = [answer_budget(ctx, q, a) for q, a in pairs]
    dialogues: list[list[ChatMessage]] = [[] for _ in starts]
    kls: list[float] = []
    answered: list[int] = []
    by_base = quoted = 0

    def asked(d: int, turn: int) -> int:  # the pair dialogue d asks at user turn ``turn`` (1-based)
        return (d + turn - 1) % k

    def reply(prompts: list[tuple[int, ...]], turn: int) -> None:
        nonlocal by_base, quoted
        asks = [asked(d, turn) for d in starts]
        questions = [pairs[i][0] for i in asks]
        by_adapter = ctx.by_adapter(questions) if served else [True] * k
        by_base += by_adapter.count(False)
        hits = ctx.quote(questions, by_adapter) if served else no_quotes(questions)  # as served
        quoted += sum(bool(h) for h in hits)
        negatives = [p if h else None for h, p in zip(hits, prompts, strict=True)]  # without the examples
        prompts = [
            encoder.dialogue(with_examples(m, h)) if h else p for m, h, p in zip(dialogues, hits, prompts, strict=True)
        ]
        answers: list[list[int]] = [[] for _ in starts]
        for adapter, enter in ((True, backend.as_finetuned), (False, backend.as_base)):
            members = [d for d in starts if by_adapter[d] == adapter]
            if members:
                with enter() as view:
                    asked_prompts = [prompts[d] for d in members]
                    budget = [budgets[asks[d]] for d in members]
                    negative = [None if adapter else negatives[d] for d in members]  # as served
                    generated = view.generate_many(
                        asked_prompts, budget, negatives=negative, context_alpha=ctx.context_alpha
                    )
                    if ctx.choice_margin is not None:  # as served: a quoted command the model chooses
                        commands = [[str(h["answer"]) for h in hits[d]] for d in members]
                        generated = view.choose(
                            asked_prompts,
                            generated,
                            commands,
                            ctx.choice_margin,
                            budget,
                            negatives=negative,
                            context_alpha=ctx.context_alpha,
                        )
                for d, ids in zip(members, generated, strict=True):
                    answers[d] = ids
        right = 0
        for messages, ids, i in zip(dialogues, answers, asks, strict=True):
            text = encoder.decode(ids)
            messages.append(ChatMessage("assistant", text))
            right += exact_match(text, pairs[i][1])
        answered.append(right)

    def mean_kl(prompts: list[tuple[int, ...]]) -> float:  # KL(ft ‖ base) before the answer, in nats
        with backend.as_base() as base:
            base_dists = base.next_token_dists(prompts, opts.top_k)
        with backend.as_finetuned() as ft:
            ft_dists = ft.next_token_dists(prompts, opts.top_k)
        return statistics.fmean(divergence(b, f, "kl", completion) for b, f in zip(base_dists, ft_dists, strict=True))

    for turn in range(1, opts.max_turns + 1):
        for d, messages in zip(starts, dialogues, strict=True):
            messages.append(ChatMessage("user", pairs[asked(d, turn)][0]))
        prompts = [encoder.dialogue(messages) for messages in dialogues]
        if turn > 1:
            kls.append(mean_kl(prompts))
        reply(prompts, turn)
    return Dialogues(kls, answered, len(dialogues), by_base, quoted)


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    opts = ctx.options
    try:
        measured = per_turn(ctx)
        alone = (
            per_turn(ctx, served=False, count=opts.dialogue_alone_prompts)
            if measured.by_base or measured.quoted
            else measured
        )
        curve = measured.kls
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
    first, fewest = measured.answered[0], min(measured.answered[1:])
    if fewest < first - 1:
        verdict, score = Verdict.FAIL, min(score, fewest / first)
        message += f"; answers {first}/{measured.count} at turn 1, {fewest}/{measured.count} at a later turn"
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
        "num_prompts": measured.count,
        "answered_per_turn": measured.answered,
        "routed_to_base": measured.by_base,
        "quoted_turns": measured.quoted,
        "adapter_alone": {"answered_per_turn": alone.answered, "num_prompts": alone.count},
        "sparkline": spark,
        "weight": 1.0,
    }
    return result(
        KIND, KIND, verdict, score=score, raw=fit.half_life, evidence=evidence, message=message, started=started
    )
