"""``calibration_drift``: did fitting the document make the model forget general knowledge? (sway 0.1.0's C2
probe, ``probes/calibration_drift.py``, same semantics and defaults.)

The items are sway's own: ``BUILT_IN_PACK`` of the installed ``dlm-sway`` distribution (200 plain-text
``(prompt, gold)`` completions such as ``("The capital of France is", " Paris")``), read from the
distribution's file ``dlm_sway/probes/_calibration_pack.py`` as a Python literal — sway's code is not
imported, and no copy of the pack ships with learnerd. ``dlm-sway`` is one of learnerd's dependencies; an
install without it (``pip install --no-deps``) skips the probe and says so (``pip install dlm-sway==0.1.0``).

For each item (the first ``drift_items_limit``, default all), with ``lp`` the log-likelihood in nats of the
gold after the prompt (tokenized as sway does: :meth:`~learnerd.eval.inputs.Encoder.completion`) and
``t = max(1, len(gold) // 4)`` sway's token estimate (characters, not tokens):

* ``delta = (lp_ft − lp_base) / t`` — negative: the adapter finds the gold less likely than the base does;
* the item *regressed* when ``delta < −drift_regression_nats`` (default 1 nat).

Each item is scored **as served** (:attr:`~learnerd.eval.probes.base.ProbeContext.route`, by its prompt): an
item the router gives the base has delta 0 (the base answers it). ``raw`` is the fraction of items regressed as
served (lower is better), ``ft_value`` the mean delta, evidence lists the ``worst_offenders`` (the at most 5
regressed items with the lowest delta: ``prompt``, ``gold``, ``delta``; ``learnerd harvest`` reads them from a
failing probe), ``routed`` (``{"adapter", "base"}``: the items by who answers them) and ``adapter_alone``
(``{"fraction_regressed", "mean_delta_nats"}``: every item through the adapter, sway's own measure). The null
adapters are measured alone (sway's calibration, below). Verdict, as sway's: with null-adapter
statistics, ``z = −(raw − null mean) / null std`` (negated: fewer regressions than noise is better) passes at
``z >= drift_assert_z_gte`` with ``score = sigmoid(z / 3)``; without, it passes when the fraction is below
``drift_assert_fraction_regressed_lt`` (0.15) and the mean delta at least ``drift_assert_mean_delta_gte``
(−0.5), with ``score = 0.6 · max(0, 1 − fraction / 0.15) + 0.4 · clip((mean + 1) / 1.5, 0, 1)``.

The base's log-likelihoods are the same at every evaluation on a base: in the model cache (the daemon's and
``learnerd eval``'s) they are computed once and read back after (:mod:`learnerd.eval.base_logprobs`), so a
later evaluation runs only the adapter's side of the pack.

Null calibration (:mod:`.null_adapter`) measures the fraction with noise adapters: on the pack's first 10
items with ``calibration = "sway"`` (sway's ``calibrate_spec``), on the probe's own items with ``"document"``.
"""

from __future__ import annotations

import ast
import functools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

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

KIND = "calibration_drift"
CATEGORY = "calibration"  # sway's score category
SWAY_DISTRIBUTION = "dlm-sway"
PACK_FILE = "dlm_sway/probes/_calibration_pack.py"
"""Where the pack lives in the ``dlm-sway`` distribution, and the name it is bound to there."""
PACK_NAME = "BUILT_IN_PACK"
CALIBRATION_ITEMS = 10
"""Items a noise adapter is measured on with ``calibration = "sway"`` (sway's ``calibrate_spec``)."""
WORST_OFFENDERS = 5


class Options(ProbeOptions):
    """``calibration_drift``'s knobs (sway's ``CalibrationDriftSpec`` defaults, names prefixed ``drift_``)."""

    drift_items_limit: int | None = Field(None, ge=1)
    """score only the pack's first N items (None: all of them)"""
    drift_regression_nats: float = Field(1.0, ge=0)
    """an item regressed when its per-token log-likelihood fell by more than this many nats"""
    drift_assert_fraction_regressed_lt: float = Field(0.15, gt=0, le=1)
    """without a null calibration, passes below this fraction of regressed items"""
    drift_assert_mean_delta_gte: float = -0.5
    """without a null calibration, also needs this mean per-token delta (nats) at least"""
    drift_assert_z_gte: float = 3.0
    """passes at this many null standard deviations below the null adapters' regressed fraction"""


@dataclass(frozen=True)
class Pack:
    """sway's general-knowledge items as read from the installed distribution: ``items`` are
    ``(prompt, gold)`` strings, ``source`` says which distribution and file they came from."""

    items: tuple[tuple[str, str], ...]
    source: str


@functools.cache
def sway_pack() -> Pack:
    """``BUILT_IN_PACK`` of the installed ``dlm-sway``, evaluated as a literal from its source file.

    Raises:
        NotApplicable: ``dlm-sway`` is not installed, or its distribution lacks the file.
        ValueError: the file holds no ``BUILT_IN_PACK`` literal of non-empty ``(str, str)`` pairs.
    """
    try:
        distribution = metadata.distribution(SWAY_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise NotApplicable(
            f"the calibration pack is sway's and {SWAY_DISTRIBUTION} is not installed (pip install dlm-sway==0.1.0)"
        ) from None
    path = Path(str(distribution.locate_file(PACK_FILE)))
    if not path.is_file():
        raise NotApplicable(f"{SWAY_DISTRIBUTION} {distribution.version} has no {PACK_FILE}")
    items = _module_literal(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), PACK_NAME)
    if not (
        isinstance(items, tuple | list)
        and items
        and all(isinstance(i, tuple) and len(i) == 2 and all(isinstance(s, str) and s for s in i) for i in items)
    ):
        raise ValueError(f"{path}: no {PACK_NAME} literal of (prompt, gold) string pairs")
    return Pack(tuple(items), f"{SWAY_DISTRIBUTION} {distribution.version} {PACK_FILE} {PACK_NAME}")


def _module_literal(tree: ast.Module, name: str) -> object:
    """The literal a module binds ``name`` to at its top level (``name = …`` or ``name: T = …``); None
    when it binds none."""
    target: ast.expr
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name:
            return ast.literal_eval(value)
    return None


def deltas(ctx: ProbeContext, ft_view: ViewFactory, items: Sequence[tuple[str, str]]) -> list[float]:
    """``(lp_ft − lp_base) / max(1, len(gold) // 4)`` of each ``(prompt, gold)`` of ``items``, nats per
    estimated token, ``ft_view`` as the fine-tuned side; every item in one batched call per view.

    Raises:
        ValueError: a gold adds no token to its prompt.
        NonFiniteLogitsError: a view's logits are unusable.
    """
    encoder = ctx.inputs.encoder
    scored: list[Scored] = [encoder.completion(prompt, gold) for prompt, gold in items]
    pairs = [(s.context, s.target) for s in scored]
    with ctx.backend.as_base() as base:
        base_lp = base.logprobs(pairs)
    with ft_view() as ft:
        ft_lp = ft.logprobs(pairs)
    return [(f - b) / token_estimate(gold) for (_, gold), b, f in zip(items, base_lp, ft_lp, strict=True)]


def _fraction_regressed(values: Sequence[float], threshold: float) -> float:
    return sum(v < -threshold for v in values) / len(values)


def _items(ctx: ProbeContext) -> tuple[tuple[str, str], ...]:
    return sway_pack().items[: ctx.options.drift_items_limit]


def raw_value(ctx: ProbeContext, ft_view: ViewFactory) -> float:
    """The fraction of items regressed with ``ft_view`` as the fine-tuned side: the pack's first
    :data:`CALIBRATION_ITEMS` with ``calibration = "sway"``, the probe's own items with ``"document"``."""
    items = sway_pack().items[:CALIBRATION_ITEMS] if ctx.options.sway_nulls else _items(ctx)
    return _fraction_regressed(deltas(ctx, ft_view, items), ctx.options.drift_regression_nats)


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.perf_counter()
    opts = ctx.options
    try:
        items = _items(ctx)
        alone = deltas(ctx, ctx.backend.as_finetuned, items)
        by_adapter = ctx.by_adapter([prompt for prompt, _ in items])
    except NotApplicable as exc:
        return skipped(KIND, KIND, str(exc))
    except Exception as exc:
        return errored(KIND, KIND, exc, started)
    values = [d if a else 0.0 for d, a in zip(alone, by_adapter, strict=True)]  # as served: the base's delta is 0
    threshold = opts.drift_regression_nats
    regressed = sorted(
        ({"prompt": p, "gold": g, "delta": d} for (p, g), d in zip(items, values, strict=True) if d < -threshold),
        key=itemgetter("delta"),
    )
    frac = len(regressed) / len(items)
    mean = statistics.fmean(values)
    null_z = z_score(ctx, KIND, frac)
    z = None if null_z is None else -null_z
    counted = f"{len(regressed)}/{len(items)} items regressed"
    if z is not None:
        passed, score = z >= opts.drift_assert_z_gte, sigmoid(z / 3.0)
        message = f"{counted} (frac={frac:.1%}), mean_delta={mean:+.3f} nats/tok, z={z:+.2f}σ vs null"
    else:
        lt = opts.drift_assert_fraction_regressed_lt
        passed = frac < lt and mean >= opts.drift_assert_mean_delta_gte
        score = 0.6 * max(0.0, 1.0 - frac / lt) + 0.4 * max(0.0, min(1.0, (mean + 1.0) / 1.5))
        message = (
            f"{counted} >{threshold:.1f} nats (frac={frac:.1%}), mean_delta={mean:+.3f} nats/tok "
            f"(no calibration for {KIND})"
        )
    evidence = {
        "fraction_regressed": frac,
        "mean_delta_nats": mean,
        "regressed_count": len(regressed),
        "total_items": len(items),
        "worst_offenders": regressed[:WORST_OFFENDERS],
        "regression_nats_threshold": threshold,
        "pack": sway_pack().source,
        "routed": {"adapter": sum(by_adapter), "base": len(items) - sum(by_adapter)},
        "adapter_alone": {
            "fraction_regressed": _fraction_regressed(alone, threshold),
            "mean_delta_nats": statistics.fmean(alone),
        },
        "weight": 1.0,
    }
    if KIND in ctx.null_stats:
        evidence["null"] = dict(ctx.null_stats[KIND])
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return result(
        KIND, KIND, verdict, score=score, raw=frac, evidence=evidence, message=message, started=started, z=z,
        ft_value=mean,
    )  # fmt: skip
