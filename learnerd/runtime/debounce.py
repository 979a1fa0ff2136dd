"""A debouncer: a burst of events for one key becomes one call, once the key has been quiet for a while.

``touch(key)`` (re)arms the key's timer: the key fires ``quiet_s`` seconds after its last touch — or
``max_wait_s`` after the first touch of the burst, whichever comes first, so a document saved every
second still trains. One task (:meth:`Debouncer.run`) serves every key. Time comes from an injected
:class:`~learnerd.runtime.workqueue.Clock` (tests use ``FakeClock``). Not thread-safe: call it from the
event loop's thread.

Unlike the workqueue's ``add_after`` (where an earlier ready time wins), a later touch here *postpones*
the key: that is what makes a burst of saves one retrain.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import anyio

from learnerd.runtime.workqueue import Clock, RealClock

K = TypeVar("K", bound=Hashable)


class Debouncer(Generic[K]):
    """Calls ``fire(key)`` once per burst of :meth:`touch` calls (see the module docstring).

    Args:
        fire: called in the event loop with each key whose timer ran out (it must not block).
        quiet_s: seconds without a touch before a key fires; > 0.
        max_wait_s: seconds after the first touch of a burst by which it fires regardless; >= ``quiet_s``.
        clock: the clock timers run on.

    Raises:
        ValueError: ``quiet_s`` or ``max_wait_s`` out of range.
    """

    def __init__(
        self, fire: Callable[[K], None], *, quiet_s: float, max_wait_s: float, clock: Clock | None = None
    ) -> None:
        if not 0 < quiet_s <= max_wait_s:
            raise ValueError(f"need 0 < quiet_s <= max_wait_s, not {quiet_s}, {max_wait_s}")
        self._fire = fire
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self._clock = clock or RealClock()
        self._first: dict[K, float] = {}
        self._deadline: dict[K, float] = {}
        self._wake = anyio.Event()

    def touch(self, key: K) -> None:
        """An event for ``key``: fire it ``quiet_s`` from now (but no later than ``max_wait_s`` after the
        first touch of this burst)."""
        now = self._clock.now()
        first = self._first.setdefault(key, now)
        new = key not in self._deadline
        self._deadline[key] = min(now + self.quiet_s, first + self.max_wait_s)
        if new:
            self._wake.set()  # a later deadline for a waiting key needs no wake-up: run() re-checks

    def remaining(self, key: K) -> float | None:
        """Seconds until ``key`` fires, or None when it is not waiting."""
        deadline = self._deadline.get(key)
        return None if deadline is None else max(0.0, deadline - self._clock.now())

    def __len__(self) -> int:
        """Keys waiting to fire."""
        return len(self._deadline)

    async def run(self) -> None:
        """Fire keys as their timers run out, until cancelled."""
        while True:
            self._wake = anyio.Event()
            now = self._clock.now()
            for key in [k for k, d in self._deadline.items() if d <= now]:
                del self._deadline[key], self._first[key]
                self._fire(key)
            if not self._deadline:
                await self._wake.wait()
                continue
            delay = min(self._deadline.values()) - now
            async with anyio.create_task_group() as tg:

                async def sleep(delay: float = delay) -> None:
                    await self._clock.sleep(delay)
                    tg.cancel_scope.cancel()

                async def wake() -> None:
                    await self._wake.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(sleep)
                tg.start_soon(wake)
