"""How many of the base's right answers a candidate may lose: retention as a statistical decision.

A candidate answers each of the ``n`` general questions the base answers right (``answer_retention``'s
``base_right``) or loses it. Counting the ``n`` items as independent trials with the candidate's true keep rate
``p``, its lost count is ``L ~ Binomial(n, 1 − p)``, and the rule "pass iff ``L <= c``" has two operating
characteristics at the two keep rates the gate names (``[evaluation.gate]``):

* at ``retention_target_keep`` (0.97): ``P(pass) = P(L <= c | 1 − target)`` — a candidate that keeps what it
  should is promoted at least ``retention_power`` (0.95) of the time;
* at ``retention_floor_keep`` (0.90): ``P(fail) = P(L > c | 1 − floor)`` — one that forgets is rejected at least
  ``retention_power`` of the time.

``c`` is the **largest** count for which the second holds: the most losses the rule can allow while a candidate
at the floor still fails with probability ``retention_power`` (``scipy.stats.binom``'s survival function). With
that ``c`` the first holds too once ``n`` is large enough (from 142 right answers on at the defaults, and at
129–134: the counts are whole numbers). When it does not, ``n`` is too small for both operating points and the
rule still uses that ``c`` — the gate fails closed: a forgetting candidate is rejected as often as stated, and
the pass probability at the target, below ``retention_power``, is said in the check's detail. When even
``c = 0`` cannot reject a candidate at the floor that often (``n`` of 28 or fewer at the defaults), ``c`` is 0:
any lost answer fails.

This is a single sampling plan of acceptance sampling (Montgomery, *Introduction to Statistical Quality Control*,
ch. 15): a lost answer is a defective, the target's loss rate the acceptable quality level with a producer's risk
of ``1 − power``, the floor's the lot tolerance with a consumer's risk of ``1 − power``; the plan is chosen for the
consumer. That items are lost independently is the model's assumption, not a measured fact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class RetentionRule:
    """The rule for ``n`` right answers: pass iff at most ``allowed_lost`` are lost. ``pass_at_target`` is
    ``P(pass)`` for a candidate keeping ``target_keep``, ``fail_at_floor`` ``P(fail)`` for one keeping
    ``floor_keep``; ``sufficient``: both are at least ``power``."""

    n: int
    allowed_lost: int
    target_keep: float
    floor_keep: float
    power: float
    pass_at_target: float
    fail_at_floor: float

    @property
    def sufficient(self) -> bool:
        """Whether ``n`` is large enough for both operating points."""
        return self.pass_at_target >= self.power and self.fail_at_floor >= self.power

    def passes(self, lost: int) -> bool:
        """Whether a candidate that lost ``lost`` of the ``n`` right answers passes."""
        return lost <= self.allowed_lost

    def describe(self) -> str:
        """The rule and its operating characteristics in one clause, as the gate's detail and the probe's
        message say them."""
        odds = (
            f"P(pass | keeps {self.target_keep:.0%}) = {self.pass_at_target:.3f}, "
            f"P(fail | keeps {self.floor_keep:.0%}) = {self.fail_at_floor:.3f}"
        )
        if self.sufficient:
            return f"at most {self.allowed_lost} of {self.n} may be lost ({odds})"
        return (
            f"at most {self.allowed_lost} of {self.n} may be lost; {self.n} right answers are too few for both "
            f"operating points at {self.power:.0%} ({odds}): the floor's side decides"
        )


@functools.lru_cache(maxsize=256)  # pure: the gate asks for the same n at every decision
def retention_rule(n: int, target_keep: float, floor_keep: float, power: float) -> RetentionRule:
    """The rule for ``n`` right answers (the module docstring).

    Raises:
        ValueError: ``n`` is negative, the keep rates are not ``0 <= floor_keep < target_keep <= 1``, or
            ``power`` is not in (0, 1).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if not 0.0 <= floor_keep < target_keep <= 1.0:
        raise ValueError(f"need 0 <= floor_keep < target_keep <= 1, not {floor_keep} and {target_keep}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), not {power}")
    import numpy as np
    from scipy.stats import binom  # scipy.stats takes a while to import: only when a rule is made

    floor_lost, target_lost = 1.0 - floor_keep, 1.0 - target_keep
    # P(L > c | floor) for c = 0..n-1 falls as c grows: the largest c that still rejects often enough, else 0
    rejects = np.flatnonzero(binom.sf(np.arange(max(n, 1)), n, floor_lost) >= power)
    allowed = int(rejects[-1]) if rejects.size else 0
    return RetentionRule(
        n=n,
        allowed_lost=allowed,
        target_keep=target_keep,
        floor_keep=floor_keep,
        power=power,
        pass_at_target=float(binom.cdf(allowed, n, target_lost)),
        fail_at_floor=float(binom.sf(allowed, n, floor_lost)),
    )
