"""answer_retention's statistical rule (learnerd.eval.retention_rule): its operating characteristics, computed
and simulated — candidates whose kept counts are drawn from Binomial(n, 0.97) and Binomial(n, 0.90), with a
fixed seed, judged by the gate itself."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from learnerd.eval.gate import decide
from learnerd.eval.probes import retention
from learnerd.eval.report import ProbeResult, Report, Score, Verdict
from learnerd.eval.retention_rule import retention_rule
from learnerd.eval.settings import GateSettings

GATE = GateSettings()
BASE_RIGHT = 231
"""SmolLM2-135M-Instruct's right answers on the pool (docs/evaluation.md, "Retention as a statistical decision")."""
DRAWS = 4000


def candidate(kept: int, n: int) -> Report:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    probe = ProbeResult(
        retention.KIND, retention.KIND, Verdict.PASS, kept / n, kept / n, {"kept": kept, "base_right": n}, ""
    )
    return Report("0.1.0", "b", "a", t, t, 0.0, Score(0.5), (probe,))


def test_every_n_from_142_on_is_enough_for_both():
    assert all(GATE.retention_rule(n).sufficient for n in range(142, 701))
    assert not GATE.retention_rule(141).sufficient


@pytest.mark.parametrize("n", [BASE_RIGHT, 142, 300, 600])
def test_both_operating_points_hold_from_enough_right_answers(n):
    rule = GATE.retention_rule(n)
    assert rule.sufficient
    assert rule.pass_at_target >= 0.95 and rule.fail_at_floor >= 0.95
    # the largest allowance with that rejection rate: one more loss allowed would pass a 90 % keeper too often
    assert retention_rule(n, 0.97, 0.90, 0.95).allowed_lost == rule.allowed_lost
    assert 1 - _cdf(rule.allowed_lost + 1, n, 0.10) < 0.95


def _cdf(k: int, n: int, p: float) -> float:
    from scipy.stats import binom

    return float(binom.cdf(k, n, p))


def test_the_simulated_rates_meet_the_operating_characteristics():
    """Kept counts drawn for DRAWS candidates at each operating point (seeded), each judged by decide()."""
    rng = np.random.default_rng(59)
    keeping = rng.binomial(BASE_RIGHT, 0.97, size=DRAWS)
    forgetting = rng.binomial(BASE_RIGHT, 0.90, size=DRAWS)
    passed = np.mean([decide(candidate(int(k), BASE_RIGHT), None, GATE).promoted for k in keeping])
    failed = np.mean([not decide(candidate(int(k), BASE_RIGHT), None, GATE).promoted for k in forgetting])
    rule = GATE.retention_rule(BASE_RIGHT)
    assert passed >= 0.95 and failed >= 0.95, (passed, failed)
    # and the simulation agrees with the exact binomial probabilities (4000 draws: standard error < 0.004)
    assert passed == pytest.approx(rule.pass_at_target, abs=0.02)
    assert failed == pytest.approx(rule.fail_at_floor, abs=0.02)


def test_the_old_pool_was_too_small_and_the_floor_decides():
    """65 right answers: no allowance gives both; the rule keeps the floor's rejection rate."""
    rule = GATE.retention_rule(65)
    assert not rule.sufficient and rule.allowed_lost == 2
    assert rule.fail_at_floor >= 0.95 > rule.pass_at_target
    rng = np.random.default_rng(60)
    failed = np.mean([not rule.passes(65 - int(k)) for k in rng.binomial(65, 0.90, size=DRAWS)])
    assert failed >= 0.95


@pytest.mark.parametrize(("n", "allowed"), [(0, 0), (1, 0), (28, 0), (29, 0)])
def test_a_handful_of_right_answers_allows_no_loss(n, allowed):
    assert GATE.retention_rule(n).allowed_lost == allowed


def test_a_floor_of_zero_fails_only_a_candidate_that_loses_everything():
    rule = GateSettings(retention_floor_keep=0.0).retention_rule(50)
    assert rule.passes(49) and not rule.passes(50)


@pytest.mark.parametrize(
    ("n", "target", "floor", "power"), [(-1, 0.97, 0.9, 0.95), (10, 0.9, 0.9, 0.95), (10, 0.97, 0.9, 1.0)]
)
def test_bad_arguments_are_refused(n, target, floor, power):
    with pytest.raises(ValueError):
        retention_rule(n, target, floor, power)
