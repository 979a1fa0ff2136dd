"""The clock every queue and rate limiter reads, injected so that tests run on a fake one.

:class:`RealClock` is the monotonic clock of the process; :class:`FakeClock` only moves when a test
calls :meth:`FakeClock.step` or :meth:`FakeClock.set_time`, which makes timing tests deterministic
and instant (after client-go's use of ``k8s.io/utils/clock`` and its testing ``FakeClock``).
"""

from __future__ import annotations

import itertools
import time
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock: :meth:`now` in seconds (arbitrary origin) and an async :meth:`sleep`."""

    def now(self) -> float:
        """Monotonic time in seconds; only differences between two readings mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock (at once, after a checkpoint, when <= 0)."""
        ...


class RealClock:
    """``time.monotonic()`` and ``anyio.sleep``: the clock of a running daemon."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(seconds, 0.0))


class FakeClock:
    """A clock that stands still until the test moves it.

    ``sleep(s)`` registers a sleeper with the deadline ``now() + s`` and returns once
    :meth:`step` or :meth:`set_time` has moved the clock to or past that deadline. Sleepers are woken
    in deadline order; they run at the next checkpoint of the test, not inside ``step``. Cancelling
    a sleep removes its sleeper.

    Args:
        start: the initial reading of :meth:`now`, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._order = itertools.count()
        # (deadline, order, event) of every pending sleep; order keeps equal deadlines first-come first-woken.
        self._sleepers: list[tuple[float, int, anyio.Event]] = []

    def now(self) -> float:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many ``sleep`` calls are waiting for the clock to move."""
        return len(self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        entry = (self._now + seconds, next(self._order), anyio.Event())
        self._sleepers.append(entry)
        try:
            await entry[2].wait()
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def step(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0) and wake every sleeper whose deadline has come.

        Raises:
            ValueError: ``seconds`` is negative (use :meth:`set_time` to move the clock back).
        """
        if seconds < 0:
            raise ValueError(f"FakeClock.step needs seconds >= 0, not {seconds}")
        self.set_time(self._now + seconds)

    def set_time(self, now: float) -> None:
        """Set the reading of :meth:`now` (backwards too) and wake every sleeper whose deadline is <= ``now``."""
        self._now = float(now)
        due = sorted(s for s in self._sleepers if s[0] <= self._now)
        for entry in due:
            self._sleepers.remove(entry)
            entry[2].set()
