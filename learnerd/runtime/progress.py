r"""How far along long work is: steps done of a total, the pace, and the time left.

:class:`StepProgress` follows one piece of work (a training cycle's optimizer steps, an evaluation's
steps, a backfill's blocks). Its pace is measured from the first step it saw to the latest, so the time
spent before the first step (loading a model) and a run resumed half-way (an evolution's later
iterations) do not skew it; the estimate of the time left is the remaining steps at that pace, less
the time since the latest step.

:class:`ProgressBoard` holds the :class:`StepProgress` of every key a reconciler has in flight, with a
few fields of its own (a loss, a version) and its *phase* (work of another kind before the steps, counted in its
own units: a training process's ``base answers`` before its ``training step``\ s; a new phase starts a new
pace), for readers on other threads: the admin status and the
metrics read :meth:`ProgressBoard.snapshot` through a reconciler's ``progress()``
(:class:`~learnerd.runtime.reconcile.ProgressReporter`), while the work updates it, possibly from a worker
thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

MEASURES = ("step", "total", "elapsed_s", "s_per_step", "eta_s")
"""The keys of :meth:`StepProgress.to_json`; a :meth:`ProgressBoard.snapshot` entry's other keys are its fields."""


class StepProgress:
    """``step`` of ``total`` steps of one piece of work (``total`` None while not known yet).

    Args:
        clock: monotonic seconds; the work starts at construction.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.step = 0
        self.total: int | None = None
        self._first: tuple[int, float] | None = None  # (step, when) of the first step seen
        self._last: tuple[int, float] | None = None  # (step, when) of the latest step seen

    def update(self, step: int, total: int | None = None) -> None:
        """``step`` steps are done now (of ``total``, when given; a total once known is kept). Step 0 does
        not start the pace: the time before the first step is not a step's."""
        now = self._clock()
        if total is not None:
            self.total = total
        if step > 0 and (self._first is None or step < self._first[0]):
            self._first = self._last = (step, now)
        elif step > 0 and step != self.step:
            self._last = (step, now)
        self.step = step

    def elapsed_s(self) -> float:
        """Seconds since the work started."""
        return self._clock() - self.started

    def seconds_per_step(self) -> float | None:
        """The pace, in seconds per step, from the first step seen to the latest; None before two were seen."""
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return None
        return (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])

    def eta_s(self) -> float | None:
        """Seconds until the last step, at :meth:`seconds_per_step`; None while the total or the pace is unknown."""
        pace = self.seconds_per_step()
        if pace is None or self.total is None or self._last is None:
            return None
        return max(0.0, (self.total - self.step) * pace - (self._clock() - self._last[1]))

    def to_json(self) -> dict[str, Any]:
        """``{"step", "total", "elapsed_s", "s_per_step", "eta_s"}`` (seconds rounded to milliseconds; None where
        unknown)."""
        pace, eta = self.seconds_per_step(), self.eta_s()
        return {
            "step": self.step,
            "total": self.total,
            "elapsed_s": round(self.elapsed_s(), 3),
            "s_per_step": round(pace, 3) if pace is not None else None,
            "eta_s": round(eta, 3) if eta is not None else None,
        }


class ProgressBoard:
    """The progress of each key in flight, safe to update and read from different threads.

    Args:
        clock: monotonic seconds, for every :class:`StepProgress` on the board.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._work: dict[str, tuple[StepProgress, dict[str, Any]]] = {}

    def begin(self, key: str, total: int | None = None, **fields: Any) -> None:
        """``key``'s work starts now (at step 0; a key already on the board starts over); ``fields`` are
        JSON-able values shown beside its steps."""
        progress = StepProgress(self._clock)
        progress.total = total
        with self._lock:
            self._work[key] = (progress, dict(fields))

    def update(self, key: str, step: int, total: int | None = None, *, phase: str | None = None, **fields: Any) -> None:
        """``step`` (of ``total``) steps of ``key`` are done; ``fields`` replace the ones of the same name. A
        ``phase`` other than the key's (its field ``phase``) starts a new :class:`StepProgress`: steps, total and
        pace are the new phase's. A key not on the board (ended already) is ignored."""
        with self._lock:
            entry = self._work.get(key)
            if entry is None:
                return
            if phase is not None and entry[1].get("phase") != phase:
                entry = self._work[key] = (StepProgress(self._clock), {**entry[1], "phase": phase})
            entry[0].update(step, total)
            entry[1].update(fields)

    def end(self, key: str) -> None:
        """``key``'s work is over (done, failed or cancelled): it leaves the board."""
        with self._lock:
            self._work.pop(key, None)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every key in flight → :meth:`StepProgress.to_json` with its fields."""
        with self._lock:
            entries = list(self._work.items())
            return {key: {**progress.to_json(), **fields} for key, (progress, fields) in entries}
