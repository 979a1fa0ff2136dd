"""``answer_retention``: does the adapter still answer what the base answered right? (learnerd's own probe;
sway 0.1.0 has none like it, its category is that of sway's ``calibration_drift``.)

The pool is :data:`POOL` (``learnerd/eval/packs/general.jsonl``, shipped in the package): general questions
composed for learnerd — knowledge, arithmetic, short writing and code — one JSON object a line with
``category``, ``prompt`` and a short ``gold`` answer. Both views answer greedily (at most
``retention_max_new_tokens`` new tokens), in batches (:meth:`~learnerd.eval.backend.View.generate_many`),
each question rendered as training renders one (:meth:`~learnerd.eval.inputs.Encoder.prompt`). An answer is
*right* when it contains the gold (:func:`contains`: ignoring case, not inside a longer word or number).

The base's answers decide which items count (those it answers right); the adapter answers only those (one
token for the others: a generation's first step is the next-token distribution the divergence needs,
:meth:`~learnerd.eval.backend.View.answers`, so each view runs the pool's prompts once). The base's answers
are kept in the model cache when the backend has an answer store (:mod:`learnerd.eval.base_answers`): the
next evaluation on the same base only runs the adapter's side.
``raw`` and ``score`` are the fraction the adapter still answers right (``kept / base_right``); the verdict
passes when it is at least ``retention_min_kept`` (default 0.95). Evidence: ``pool_size``, ``base_right``,
``kept``, ``kept_fraction``, ``by_category`` (``{category: {"base_right", "kept"}}``), ``lost`` (the first 5
items the adapter no longer answers right: ``prompt``, ``gold``, ``base_answer``, ``answer``), and
``mean_js_nats``: the mean Jensen–Shannon divergence (nats, at most ln 2) between the base's and the
adapter's next-token distributions after each prompt of the pool (:mod:`learnerd.ml.divergence`, ``top_k``
tokens). A base that answers none right leaves nothing to retain: the probe is skipped with that reason. No
null calibration: a noise adapter keeps every answer.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import Field

from learnerd.eval.probes.common import NotApplicable, ProbeOptions, errored, result, skipped
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.ml.divergence import divergence

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "answer_retention"
CATEGORY = "calibration"  # sway's category of knowledge retention (calibration_drift)
POOL = "packs/general.jsonl"
"""The pool's file, relative to the ``learnerd.eval`` package."""
LOST_EVIDENCE = 5


class Options(ProbeOptions):
    """``answer_retention``'s knobs."""

    retention_min_kept: float = Field(0.95, ge=0, le=1)
    """passes when the adapter keeps at least this fraction of the answers the base got right"""
    retention_max_new_tokens: int = Field(32, ge=1)
    """new tokens of each greedy answer at most"""


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
        items.append(PoolItem(*fields))
    return tuple(items)


def contains(answer: str, gold: str) -> bool:
    """Whether ``answer`` contains ``gold``, ignoring case and runs of whitespace, and not as part of a
    longer word or number (``"12"`` is not in ``"120"``; ``".py"`` is in ``"main.py"``)."""
    pattern = r"\s+".join(re.escape(word) for word in gold.split())
    before = r"(?<!\w)" if gold[:1].isalnum() else ""
    after = r"(?!\w)" if gold[-1:].isalnum() else ""
    return re.search(before + pattern + after, answer, re.IGNORECASE) is not None


def judge(ctx: ProbeContext, pool: Sequence[PoolItem]) -> ProbeResult:
    """The probe's result on ``pool`` (:func:`run` passes :func:`general_pool`).

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
    budgets = [1] * len(pool)  # one token where the base was wrong: its first step's distribution is all needed
    for i in right:
        budgets[i] = budget
    with ctx.backend.as_finetuned() as ft:
        ft_ids, ft_dists = ft.answers(prompts, budgets, opts.top_k)
    answers = [encoder.decode(ft_ids[i]) for i in right]
    kept = {i for i, answer in zip(right, answers, strict=True) if contains(answer, pool[i].gold)}
    lost = [
        {"prompt": pool[i].prompt, "gold": pool[i].gold, "base_answer": base_answers[i], "answer": answer}
        for i, answer in zip(right, answers, strict=True)
        if i not in kept
    ]
    by_category: dict[str, dict[str, int]] = {}
    for i in right:
        counts = by_category.setdefault(pool[i].category, {"base_right": 0, "kept": 0})
        counts["base_right"] += 1
        counts["kept"] += i in kept
    fraction = len(kept) / len(right)
    mean_js = statistics.fmean(divergence(b, f, "js") for b, f in zip(base_dists, ft_dists, strict=True))
    passed = fraction >= opts.retention_min_kept
    evidence: dict[str, Any] = {
        "pool_size": len(pool),
        "base_right": len(right),
        "kept": len(kept),
        "kept_fraction": fraction,
        "min_kept": opts.retention_min_kept,
        "by_category": by_category,
        "lost": lost[:LOST_EVIDENCE],
        "mean_js_nats": mean_js,
        "max_new_tokens": budget,
        "weight": 1.0,
    }
    message = (
        f"kept {len(kept)}/{len(right)} answers the base got right ({fraction:.0%} "
        f"{'>=' if passed else '<'} {opts.retention_min_kept:.0%}); mean JS {mean_js:.4f} nats over {len(pool)} "
        "prompts"
    )
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return result(
        KIND, KIND, verdict, score=fraction, raw=fraction, evidence=evidence, message=message, started=started
    )


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    try:
        return judge(ctx, general_pool())
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc), started)  # after the base answered the whole pool
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
