"""The half-life fit of the multi-turn probe on synthetic curves."""

from __future__ import annotations

import math

import pytest

from learnerd.eval.half_life import fit_half_life, sparkline

TURNS = [2, 3, 4, 5, 6]


@pytest.mark.parametrize(("a", "b"), [(1.0, 0.3), (0.05, 0.9), (3.0, 0.02)])
def test_exact_exponentials_are_recovered(a, b):
    fit = fit_half_life(TURNS, [a * math.exp(-b * t) for t in TURNS], max_turns=6)
    assert fit.b == pytest.approx(b, rel=1e-9) and fit.a == pytest.approx(a, rel=1e-9)
    assert fit.status == "ok" and fit.half_life == pytest.approx(math.log(2) / b, rel=1e-9)


def test_a_slow_decay_saturates_as_stable_not_inf():
    fit = fit_half_life(TURNS, [math.exp(-0.001 * t) for t in TURNS], max_turns=6)  # half-life 693 turns
    assert (fit.status, fit.half_life) == ("stable", 60.0)


def test_a_flat_curve_is_stable_with_the_saturated_value():
    fit = fit_half_life([2, 3, 4, 5], [0.4] * 4, max_turns=5)
    assert (fit.status, fit.half_life, fit.b) == ("stable", 50.0, 0.0)
    assert math.isfinite(fit.half_life)


def test_a_growing_curve_is_non_monotonic():
    fit = fit_half_life(TURNS, [0.1 * math.exp(0.4 * t) for t in TURNS], max_turns=6)
    assert fit.status == "non_monotonic" and fit.half_life is None and fit.b == pytest.approx(-0.4)


def test_all_zero_is_degenerate():
    fit = fit_half_life(TURNS, [0.0] * 5, max_turns=6)
    assert (fit.status, fit.half_life, fit.turns_used) == ("degenerate", 0.0, ())
    assert fit_half_life(TURNS, [0.0, 0.0, 0.3, 0.0, 0.0], max_turns=6).status == "degenerate"


def test_zero_turns_are_left_out_of_the_fit():
    values = [0.8 * math.exp(-0.5 * t) if t != 4 else 0.0 for t in TURNS]
    fit = fit_half_life(TURNS, values, max_turns=6)
    assert fit.turns_used == (2, 3, 5, 6) and fit.b == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("turns", "values"),
    [([2], [0.1]), ([2, 3], [0.1]), ([2, 2], [0.1, 0.2]), ([2, 3], [0.1, -1.0]), ([2, 3], [0.1, math.nan])],
)
def test_bad_curves_are_refused(turns, values):
    with pytest.raises(ValueError):
        fit_half_life(turns, values, max_turns=4)


def test_sparkline():
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([2.0, 2.0]) == "▄▄"
    assert sparkline([1.0, math.nan]) == "▄?"
