"""The delaying queue: ``add_after(key, delay)`` over one timer task and a heap (client-go's ``delaying_queue.go``)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from learnerd.runtime.workqueue.clock import Clock
from learnerd.runtime.workqueue.metrics import MetricsProvider
from learnerd.runtime.workqueue.queue import WorkQueue

K = TypeVar("K", bound=Hashable)


@dataclass(order=True, slots=True)
class _Waiting(Generic[K]):
    """A key waiting for its ready time; ordered by (ready_at, seq) so equal times keep add order."""

    ready_at: float
    seq: int
    key: K = field(compare=False)
    # False once an earlier add_after replaced this entry; the heap drops it when it reaches the top.
    live: bool = field(default=True, compare=False)


class DelayingQueue(WorkQueue[K]):
    """A :class:`~.queue.WorkQueue` that can also add a key after a delay.

    The delays are served by one timer task, :meth:`run`, which must be running for delayed keys to
    arrive: start it in the daemon's task group (``tg.start_soon(queue.run)``; a
    :class:`~learnerd.runtime.controller.Controller` does this itself). It returns once the queue
    shuts down; keys still waiting for their delay are then dropped, as in client-go. Keys given to
    :meth:`add_after` before the timer starts simply wait in the heap until it does.

    Arguments as for :class:`~.queue.WorkQueue`.
    """

    def __init__(self, name: str = "", *, clock: Clock | None = None, metrics: MetricsProvider | None = None) -> None:
        super().__init__(name, clock=clock, metrics=metrics)
        self._heap: list[_Waiting[K]] = []
        self._waiting: dict[K, _Waiting[K]] = {}
        self._seq = itertools.count()
        self._timer_running = False
        self._timer_scope: anyio.CancelScope | None = None  # set while the timer sleeps

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed on the queue's clock; at once if ``delay <= 0``.

        A key already waiting keeps the earlier of its two ready times: a shorter delay brings it
        forward, a longer one changes nothing. Ignored once the queue is shutting down. Each call
        counts in ``workqueue_retries_total``.
        """
        if self._shutting_down:
            return
        self._metrics.retry()
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None:
            if current.ready_at <= ready_at:
                return
            current.live = False
        entry = _Waiting(ready_at, next(self._seq), key)
        self._waiting[key] = entry
        heapq.heappush(self._heap, entry)
        # The timer sleeps until the head's ready time; it only needs waking for a new head.
        if self._heap[0] is entry and self._timer_scope is not None:
            self._timer_scope.cancel()

    @property
    def num_waiting(self) -> int:
        """Keys waiting for their delay to pass."""
        return len(self._waiting)

    @property
    def idle(self) -> bool:
        """True when no key is queued, being processed, or waiting for its delay."""
        return super().idle and not self._waiting

    async def run(self) -> None:
        """The timer task: add each waiting key when its ready time comes; return when the queue shuts down.

        Raises:
            RuntimeError: the timer of this queue is already running.
        """
        if self._timer_running:
            raise RuntimeError(f"the timer of workqueue {self._name!r} is already running")
        self._timer_running = True
        try:
            while not self._shutting_down:
                now = self._clock.now()
                next_ready_at = self._add_ready(now)
                with anyio.CancelScope() as scope:
                    # No checkpoint between computing next_ready_at and publishing the scope, so an
                    # add_after with an earlier ready time always finds the scope to cancel.
                    self._timer_scope = scope
                    if next_ready_at is None:
                        await anyio.sleep_forever()
                    else:
                        await self._clock.sleep(next_ready_at - now)
                self._timer_scope = None
        finally:
            self._timer_scope = None
            self._timer_running = False

    def _add_ready(self, now: float) -> float | None:
        """Add every live entry whose time has come; return the next ready time, or None."""
        heap = self._heap
        while heap and (not heap[0].live or heap[0].ready_at <= now):
            entry = heapq.heappop(heap)
            if entry.live:
                del self._waiting[entry.key]
                self.add(entry.key)
        return heap[0].ready_at if heap else None

    def _on_shutdown(self) -> None:
        self._heap.clear()
        self._waiting.clear()
        if self._timer_scope is not None:
            self._timer_scope.cancel()
