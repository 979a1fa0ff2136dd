"""How fast an adapter's influence fades over a dialogue: an exponential fit to per-turn divergences.

The multi-turn probe measures, at turns ``2..max_turns``, the divergence of the fine-tuned view from the
base. :func:`fit_half_life` fits ``kl(turn) = a · exp(−b · turn)`` by least squares on
``ln kl = ln a − b · turn`` (ordinary linear regression in log space) and reports the half-life
``ln 2 / b`` in turns — the model sway's ``multi_turn_coherence_decay`` probe uses. Statuses:

* ``ok`` — a finite half-life below the saturation value;
* ``stable`` — the curve is flat (relative spread below :data:`FLAT_RELATIVE_SPREAD`) or decays so slowly
  that the half-life reaches the saturation value ``10 × max_turns``: reported as that saturated value,
  never ``inf``;
* ``non_monotonic`` — the fitted slope rises (the adapter grows *more* distinct as the dialogue goes on);
  the half-life is undefined (None);
* ``degenerate`` — fewer than two turns with a divergence above :data:`ZERO` (all zero: the adapter
  changes nothing, a likely no-op); half-life 0.

Turns with a zero divergence are left out of the fit (their logarithm is undefined) as long as two remain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

FitStatus = Literal["ok", "stable", "non_monotonic", "degenerate"]
ZERO = 1e-12
"""A divergence at or below this many nats counts as zero."""
FLAT_RELATIVE_SPREAD = 1e-3
"""``(max − min) / mean`` of the curve below which it is flat."""
SATURATION_PER_TURN = 10.0
"""The saturated half-life is this many times ``max_turns``."""
SPARK_CHARS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class HalfLifeFit:
    """The fit: ``half_life`` in turns (None when ``non_monotonic``), the fitted ``a`` (nats) and ``b``
    (per turn) — a flat curve is ``a`` = its mean, ``b`` = 0; a degenerate one has neither — and the
    turns the fit used."""

    status: FitStatus
    half_life: float | None
    a: float | None
    b: float | None
    turns_used: tuple[int, ...]


def fit_half_life(turns: Sequence[int], values: Sequence[float], *, max_turns: int) -> HalfLifeFit:
    """Fit ``values[i] = a · exp(−b · turns[i])`` and classify the curve (see the module docstring).

    Args:
        turns: the turn numbers (e.g. ``2..max_turns``), at least two, distinct.
        values: the divergence at each turn, in nats, finite and >= 0.
        max_turns: the longest dialogue; fixes the saturated half-life ``10 × max_turns``.

    Raises:
        ValueError: fewer than two turns, mismatched lengths, repeated turns, or a negative or
            non-finite value.
    """
    x = np.asarray(turns, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError("need at least two turns, one value per turn")
    if np.unique(x).size != x.size:
        raise ValueError("turns must be distinct")
    if not np.all(np.isfinite(y)) or np.any(y < 0.0):
        raise ValueError("per-turn divergences must be finite and >= 0")
    saturation = SATURATION_PER_TURN * max_turns
    keep = y > ZERO
    used = tuple(int(t) for t in x[keep])
    if keep.sum() < 2:
        return HalfLifeFit("degenerate", 0.0, None, None, used)
    x, y = x[keep], y[keep]
    if (y.max() - y.min()) / y.mean() < FLAT_RELATIVE_SPREAD:
        return HalfLifeFit("stable", saturation, float(y.mean()), 0.0, used)
    slope, intercept = np.polyfit(x, np.log(y), 1)
    a, b = math.exp(float(intercept)), -float(slope)
    if b < 0.0:
        return HalfLifeFit("non_monotonic", None, a, b, used)
    half_life = math.log(2.0) / b if b > 0.0 else math.inf
    if half_life >= saturation:
        return HalfLifeFit("stable", saturation, a, b, used)
    return HalfLifeFit("ok", half_life, a, b, used)


def sparkline(values: Sequence[float]) -> str:
    """One block character per value, scaled from the smallest (``▁``) to the largest (``█``); a flat
    curve is all ``▄``. Non-finite values show as ``?``."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "?" * len(values)
    lo, hi = min(finite), max(finite)
    top = len(SPARK_CHARS) - 1
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append("?")
        elif hi - lo <= ZERO:
            out.append(SPARK_CHARS[top // 2])
        else:
            out.append(SPARK_CHARS[round((v - lo) / (hi - lo) * top)])
    return "".join(out)
