"""Whether a trained adapter can have learned its rows: the check behind the ``training.undertrained`` warning
and the evaluation report's ``undertrained`` finding."""

from __future__ import annotations

import math
from collections.abc import Callable

MIN_STEPS = 50
"""Fewer optimizer steps than this in a cycle: undertrained."""
UNDERTRAINED = "undertrained"
"""The prefix of the finding (sway reports findings as one-line strings)."""
GENERAL_FIX = "fix: more epochs (training.num_epochs) or more rows"


def undertrained_finding(
    steps: int, final_loss: float, vocab_size: int | None, remedy: Callable[[bool, bool], str] | None = None
) -> str | None:
    """A one-line ``undertrained: <cause>; <fix>`` finding when a cycle trained fewer than :data:`MIN_STEPS`
    steps or ended above the uniform-guess loss ln(``vocab_size``) nats/token (worse than a uniform guess over
    the vocabulary); None when neither holds. ``vocab_size`` None or 0 (unknown) skips the loss check.
    ``remedy(few_steps, high_loss)`` gives the ``cause: …; fix: …`` part (default :data:`GENERAL_FIX`)."""
    few = steps < MIN_STEPS
    high = bool(vocab_size) and final_loss > math.log(vocab_size or 1)
    causes = []
    if few:
        causes.append(f"{steps} optimizer steps (< {MIN_STEPS})")
    if high:
        uniform = math.log(vocab_size or 1)
        causes.append(f"final loss {final_loss:.3f} nats/token above a uniform guess ln({vocab_size}) = {uniform:.3f}")
    if not causes:
        return None
    return f"{UNDERTRAINED}: {' and '.join(causes)}; {remedy(few, high) if remedy else GENERAL_FIX}"
