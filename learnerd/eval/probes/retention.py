"""``answer_retention``: does the adapter still answer what the base answered right? (learnerd's own probe;
sway 0.1.0 has none like it, its category is that of sway's ``calibration_drift``.)

The pool is :data:`POOL` (``learnerd/eval/packs/general.jsonl``, shipped in the package): general questions
composed for learnerd — knowledge, arithmetic, short writing and code — one JSON object a line with
``category``, ``prompt`` and a short ``gold`` answer; ``[evaluation] retention_pool_size`` asks a seeded sample of
it instead (:func:`retention_pool`). The ``[evaluation]`` keys ``retention_max_new_tokens`` and
``retention_alone_sample`` are the probe's other knobs. Both views answer greedily (at most
``retention_max_new_tokens`` new tokens), in batches (:meth:`~learnerd.eval.backend.View.generate_many`),
each question rendered as training renders one (:meth:`~learnerd.eval.inputs.Encoder.prompt`). An answer is
*right* when it contains the gold (:func:`contains`: ignoring case, not inside a longer word or number).

The base's answers decide which items count (those it answers right); the adapter answers only those it is
scored on (:meth:`~learnerd.eval.backend.View.answers`: a generation's first step is also the next-token
distribution the divergence needs) and runs no other prompt of the pool. The base's answers
are kept in the model cache when the backend has an answer store (:mod:`learnerd.eval.base_answers`): the
next evaluation on the same base only runs the adapter's side.

Each item is scored **as served** (:attr:`~learnerd.eval.probes.base.ProbeContext.route`: the router of the
candidate, by the item's prompt as the endpoint routes a request): an item routed to the base is answered by the
base, so it is kept; one routed to the adapter is kept when the adapter's answer is right.
``raw`` and ``score`` are the fraction the served system still answers right (``kept / base_right``); the verdict
is the gate's statistical rule (:meth:`~learnerd.eval.settings.GateSettings.retention_rule`, the
``[evaluation.gate]`` operating points): it passes when at most the rule's ``allowed_lost`` of the
``base_right`` answers were lost as served. Evidence: ``pool_size``, ``base_right``, ``kept``, ``kept_fraction``,
``allowed_lost``, ``rule`` (the rule in words), ``by_category`` (``{category: {"base_right", "kept"}}``),
``lost`` (5 of the items the served system no longer answers right, those it no longer knows first: ``prompt``,
``gold``, ``base_answer``, ``answer``, ``led``, ``knows``; below), ``lost_wording``, ``lost_knowledge``,
``routed`` (``{"adapter", "base"}``: the base's right items by who answers them), ``adapter_alone`` (``{"kept",
"kept_fraction", "answered"}``: the adapter answering every item; it answers those routed to it and at most
``retention_alone_sample`` of those routed to the base, a seeded sample, so ``kept`` is the items routed to it that
it kept plus its kept fraction of the sample times the items routed to the base — exact when ``answered`` is the
base's right count), ``mean_js_nats``: the mean Jensen–Shannon divergence (nats, at most ln 2) between the
base's and the adapter's next-token distributions after each prompt the adapter answered
(:mod:`learnerd.ml.divergence`, ``top_k`` tokens; the adapter alone's), and ``js_prompts``, their count. A
base that answers none right leaves nothing to retain: the probe is skipped with that reason. No null
calibration: a noise adapter keeps every answer.

A lost answer is lost in its wording or in what it knows. Greedy decoding follows the most likely token; where
the base's own choice was a near-tie (two tokens within a few hundredths of probability) the adapter's
slightest shift takes the other path, which may not reach the gold within the token budget. So each lost item
is also *led*: the adapter continues the base's own answer from just before the gold (:func:`gold_span`),
greedily, for the gold's tokens and two more. ``lost_wording`` counts the lost items whose led continuation
still contains the gold, ``lost_knowledge`` those whose does not; each ``lost`` entry carries its ``led``
continuation and ``knows`` (whether it contains the gold). The verdict counts every lost answer (a greedy
answer without the gold is lost); the split says what was lost.
"""

from __future__ import annotations

import functools
import json
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from learnerd.eval.probes.common import NotApplicable, errored, result, skipped
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.ml.divergence import divergence

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "answer_retention"
CATEGORY = "calibration"  # sway's category of knowledge retention (calibration_drift)
POOL = "packs/general.jsonl"
"""The pool's file, relative to the ``learnerd.eval`` package."""
LOST_EVIDENCE = 5
ALONE_SEED = 0
"""The seed of :func:`alone_sample`."""
POOL_SEED = 0
"""The seed of :func:`retention_pool`'s sample."""


@dataclass(frozen=True)
class PoolItem:
    """A general question and the short answer a right reply contains."""

    category: str
    prompt: str
    gold: str


@functools.cache
def general_pool() -> tuple[PoolItem, ...]:
    """The items of :data:`POOL`, in file order.

    Raises:
        ValueError: a line is not a JSON object of non-empty ``category``, ``prompt`` and ``gold`` strings.
    """
    text = resources.files("learnerd.eval").joinpath(POOL).read_text(encoding="utf-8")
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = json.loads(line)
        fields = [entry.get(k) if isinstance(entry, dict) else None for k in ("category", "prompt", "gold")]
        if not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"{POOL}:{number}: not an object of non-empty category, prompt and gold strings")
        items.append(PoolItem(entry["category"], entry["prompt"], entry["gold"]))
    return tuple(items)


def gold_pattern(gold: str) -> re.Pattern[str]:
    """``gold`` as a regular expression: ignoring case and runs of whitespace, and not matching inside a
    longer word or number (``"12"`` does not match in ``"120"``; ``".py"`` does in ``"main.py"``)."""
    pattern = r"\s+".join(re.escape(word) for word in gold.split())
    before = r"(?<!\w)" if gold[:1].isalnum() else ""
    after = r"(?!\w)" if gold[-1:].isalnum() else ""
    return re.compile(before + pattern + after, re.IGNORECASE)


def contains(answer: str, gold: str) -> bool:
    """Whether ``answer`` contains ``gold`` as :func:`gold_pattern` matches it."""
    return gold_pattern(gold).search(answer) is not None


def gold_span(decode: Callable[[Sequence[int]], str], ids: Sequence[int], gold: str) -> tuple[int, int]:
    """The tokens ``[start, end)`` of the answer ``ids`` that spell its first match of ``gold``
    (:func:`gold_pattern`, on ``decode(ids)``): ``start`` the most tokens whose text ends at or before the
    match, ``end`` the fewest whose text reaches past it.

    Raises:
        ValueError: ``decode(ids)`` does not contain ``gold``.
    """
    match = gold_pattern(gold).search(decode(ids))
    if match is None:
        raise ValueError(f"the answer does not contain {gold!r}")
    end = next((k for k in range(1, len(ids)) if len(decode(ids[:k])) >= match.end()), len(ids))
    start = max(j for j in range(end) if len(decode(ids[:j])) <= match.start())
    return start, end


def lost_split(wording: int, lost: int) -> str:
    """How many of the ``lost`` answers still hold the gold when the adapter is led along the base's answer
    (``wording``: the evidence's ``lost_wording``), in the words of the probe's message and the gate's reason."""
    return f"{wording} of the {lost} lost still say the gold led along the base's answer"


def judge(ctx: ProbeContext, pool: Sequence[PoolItem]) -> ProbeResult:
    """The probe's result on ``pool`` (:func:`run` passes :func:`retention_pool`).

    Raises:
        NotApplicable: the base answers none of ``pool`` right.
        NonFiniteLogitsError: a view's logits are unusable.
        EvaluationCancelled: the backend's cancel event was set.
    """
    started = time.perf_counter()
    encoder, opts = ctx.inputs.encoder, ctx.options
    prompts = [encoder.prompt(item.prompt) for item in pool]
    budget = opts.retention_max_new_tokens
    with ctx.backend.as_base() as base:
        base_ids, base_dists = base.answers(prompts, [budget] * len(prompts), opts.top_k, persist=True)
    base_answers = [encoder.decode(ids) for ids in base_ids]
    right = [i for i, item in enumerate(pool) if contains(base_answers[i], item.gold)]
    if not right:
        raise NotApplicable(f"the base model answers none of the {len(pool)} general questions right")
    routed = {
        i for i, by_adapter in zip(right, ctx.by_adapter([pool[i].prompt for i in right]), strict=True) if by_adapter
    }
    to_base = [i for i in right if i not in routed]
    sample = alone_sample(to_base, opts.retention_alone_sample)
    asked = sorted({*routed, *sample})  # the adapter's prompts: a prompt costs a forward pass even for one token
    with ctx.backend.as_finetuned() as ft:
        ft_ids, ft_dists = ft.answers([prompts[i] for i in asked], [budget] * len(asked), opts.top_k)
        answers = {i: encoder.decode(ids) for i, ids in zip(asked, ft_ids, strict=True)}
        kept_alone = {i for i in answers if contains(answers[i], pool[i].gold)}
        kept = {i for i in right if i not in routed or i in kept_alone}  # as served: the base answers the others
        lost_items = [i for i in right if i not in kept]
        spans = [gold_span(encoder.decode, base_ids[i], pool[i].gold) for i in lost_items]
        led_ids = ft.generate_many(
            [[*prompts[i], *base_ids[i][:start]] for i, (start, _) in zip(lost_items, spans, strict=True)],
            [end - start + 2 for start, end in spans],
        )
    led = [encoder.decode(ids) for ids in led_ids]
    knows = [contains(text, pool[i].gold) for i, text in zip(lost_items, led, strict=True)]
    lost = [
        {
            "prompt": pool[i].prompt,
            "gold": pool[i].gold,
            "base_answer": base_answers[i],
            "answer": answers[i],
            "led": text,
            "knows": known,
        }
        for i, text, known in zip(lost_items, led, knows, strict=True)
    ]
    lost.sort(key=itemgetter("knows"))  # what the adapter no longer knows first
    by_category: dict[str, dict[str, int]] = {}
    for i in right:
        counts = by_category.setdefault(pool[i].category, {"base_right": 0, "kept": 0})
        counts["base_right"] += 1
        counts["kept"] += i in kept
    fraction = len(kept) / len(right)
    kept_routed = len(kept_alone & routed)  # the adapter's own items; the sample's kept scale to every base item
    alone = kept_routed + (len(kept_alone) - kept_routed) * len(to_base) / max(len(sample), 1)
    mean_js = statistics.fmean(divergence(base_dists[i], f, "js") for i, f in zip(asked, ft_dists, strict=True))
    rule = opts.gate.retention_rule(len(right))
    passed = rule.passes(len(lost_items))
    evidence: dict[str, Any] = {
        "pool_size": len(pool),
        "base_right": len(right),
        "kept": len(kept),
        "kept_fraction": fraction,
        "allowed_lost": rule.allowed_lost,
        "rule": rule.describe(),
        "by_category": by_category,
        "lost": lost[:LOST_EVIDENCE],
        "lost_wording": sum(knows),
        "lost_knowledge": len(knows) - sum(knows),
        "mean_js_nats": mean_js,
        "js_prompts": len(asked),
        "max_new_tokens": budget,
        "routed": {"adapter": len(routed), "base": len(to_base)},
        "adapter_alone": {
            "kept": round(alone),
            "kept_fraction": alone / len(right),
            "answered": len(answers),
        },
        "weight": 1.0,
    }
    split = f"; {lost_split(sum(knows), len(lost))}" if lost else ""
    estimated = f", estimated from {len(answers)}" if len(sample) < len(to_base) else ""
    message = (
        f"kept {len(kept)}/{len(right)} answers the base got right as served ({len(lost_items)} lost "
        f"{'<=' if passed else '>'} {rule.allowed_lost} allowed{split}; {len(routed)} routed to the adapter, which "
        f"alone keeps {round(alone)}{estimated}); mean JS {mean_js:.4f} nats over the {len(asked)} it answered"
    )
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return result(
        KIND, KIND, verdict, score=fraction, raw=fraction, evidence=evidence, message=message, started=started
    )


def retention_pool(size: int) -> tuple[PoolItem, ...]:
    """The items ``answer_retention`` asks (``[evaluation] retention_pool_size``): :func:`general_pool` whole when
    ``size`` is 0 or at least its length, else ``size`` of its items drawn with ``random.Random(POOL_SEED)``, in
    file order — the same items at every evaluation, so the base's stored answers serve each one.

    Raises:
        ValueError: ``size`` is negative.
    """
    if size < 0:
        raise ValueError(f"retention_pool_size must be >= 0, not {size}")
    pool = general_pool()
    if size == 0 or size >= len(pool):
        return pool
    return tuple(pool[i] for i in sorted(random.Random(POOL_SEED).sample(range(len(pool)), size)))


def alone_sample(indices: Sequence[int], size: int) -> list[int]:
    """At most ``size`` of ``indices`` for the adapter alone to answer, in their order: all of them when they are
    no more, else a sample drawn with ``random.Random(ALONE_SEED)`` (the same items at every evaluation of a pool)."""
    if len(indices) <= size:
        return list(indices)
    return sorted(random.Random(ALONE_SEED).sample(list(indices), size))


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    try:
        return judge(ctx, retention_pool(ctx.options.retention_pool_size))
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc), started)  # after the base answered every item asked
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
