"""When will the next training cycle of a document have finished? (``next_cycle_eta_s`` of ``inject_probe``.)

The estimate, in seconds from now, for document key ``k``::

    eta(k) = debounce(k) + (queued × c + Σ_j max(0, c − elapsed_j)) / workers + c

* ``debounce(k)``: seconds until ``k``'s debounce timer fires (0 when it is not waiting);
* ``queued``: keys queued on "training" now (all run before ``k``, which joins the queue behind them);
* ``elapsed_j``: how long each cycle in flight has run; ``c − elapsed_j`` is what is left of it (a cycle of
  ``k`` itself in flight counts here: probes pushed now are drained at the start of the *next* cycle);
* ``workers``: the training controller's workers, which share the work ahead;
* ``c``: the expected duration of one cycle — the mean wall time (document read to adapter committed) of
  the last :data:`WINDOW` cycles that trained, or :data:`PRIOR_CYCLE_S` before any was measured.

It assumes every queued key trains (a key whose rows did not change takes milliseconds: an upper bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

WINDOW = 5
"""Cycles the expected duration is averaged over."""
PRIOR_CYCLE_S = 60.0
"""The expected duration of a cycle (seconds) until one has been measured."""


class CycleEta:
    """Estimates ``next_cycle_eta_s`` (see the module docstring).

    Args:
        debounce_remaining: seconds until a key's debounce timer fires, or None when it is not waiting.
        queued: how many keys are queued on "training" (not in flight).
        in_flight: key → start time (``clock()`` seconds) of every cycle running now.
        recent_cycles_s: wall seconds of the latest cycles that trained, oldest first.
        workers: the training controller's workers (>= 1).
        clock: the monotonic clock ``in_flight`` start times are read on.
    """

    def __init__(
        self,
        *,
        debounce_remaining: Callable[[str], float | None],
        queued: Callable[[], int],
        in_flight: Callable[[], Mapping[str, float]],
        recent_cycles_s: Callable[[], Sequence[float]],
        workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._debounce_remaining = debounce_remaining
        self._queued = queued
        self._in_flight = in_flight
        self._recent = recent_cycles_s
        self._workers = max(1, workers)
        self._clock = clock

    def cycle_s(self) -> float:
        """The expected duration of one cycle, in seconds."""
        recent = list(self._recent())[-WINDOW:]
        return sum(recent) / len(recent) if recent else PRIOR_CYCLE_S

    def __call__(self, key: str) -> float:
        """Seconds from now until a cycle of ``key`` that starts after this call has finished."""
        c = self.cycle_s()
        now = self._clock()
        left = sum(max(0.0, c - (now - started)) for started in self._in_flight().values())
        ahead = (self._queued() * c + left) / self._workers
        return (self._debounce_remaining(key) or 0.0) + ahead + c
