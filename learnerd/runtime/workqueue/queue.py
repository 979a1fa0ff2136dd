"""The basic workqueue: FIFO, de-duplicating, never handing one key to two workers (client-go's ``queue.go``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Literal, TypeVar

import anyio
import anyio.lowlevel

from learnerd.runtime.workqueue.clock import Clock, RealClock
from learnerd.runtime.workqueue.metrics import NOOP_QUEUE_METRICS, MetricsProvider, QueueMetrics

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A FIFO of keys with a dirty set and a processing set (see the package docstring for the contract).

    Args:
        name: labels the queue's metrics; an empty name records no metrics (as in client-go).
        clock: the clock metrics and (in subclasses) delays are measured on; the real one by default.
        metrics: where the queue reports; :class:`~.metrics.NoopMetricsProvider` by default.

    Raises:
        ValueError: ``metrics`` already has a queue called ``name``.
    """

    def __init__(self, name: str = "", *, clock: Clock | None = None, metrics: MetricsProvider | None = None) -> None:
        self._name = name
        self._clock: Clock = clock if clock is not None else RealClock()
        self._metrics: QueueMetrics = (
            metrics.queue_metrics(name, self._clock) if name and metrics is not None else NOOP_QUEUE_METRICS
        )
        # Every key of _queue is in _dirty and not in _processing. A key in both _dirty and
        # _processing was added while a worker had it; done() moves it to _queue.
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: deque[anyio.Event] = deque()  # one per get() waiting for a key, oldest first
        self._watchers: list[anyio.Event] = []  # woken when done() or shutdown may have changed idle/drained
        self._shutting_down = False
        self._draining = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def clock(self) -> Clock:
        return self._clock

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing.

        A key already waiting is not queued twice; a key being processed is queued again once, when
        its worker calls :meth:`done`. Ignored once the queue is shutting down.
        """
        if self._shutting_down or key in self._dirty:
            return
        self._metrics.add(key)
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_one_getter()

    def __len__(self) -> int:
        """Keys waiting to be handed out (not those being processed); informational only."""
        return len(self._queue)

    def __bool__(self) -> bool:
        # A queue is an object, not a container to test for emptiness: `queue or default` must not
        # pick the default because the queue happens to be empty. Use len(queue) for its depth.
        return True

    async def get(self) -> tuple[K, Literal[False]] | tuple[None, Literal[True]]:
        """Wait for a key and hand it to the caller, who must call :meth:`done` with it.

        Returns:
            ``(key, False)``; or ``(None, True)`` once the queue is shut down and empty: the worker
            should then stop.

        Cancellation takes no key: a worker cancelled while waiting leaves the queue as it was.
        Like ``asyncio.Queue.get``, it returns without yielding to the event loop when a key is
        ready, so a worker loop must await something else (its processing does) to let others run.
        """
        while not self._queue and not self._shutting_down:
            waiter = anyio.Event()
            self._getters.append(waiter)
            try:
                await waiter.wait()
            except BaseException:
                if waiter.is_set():
                    # This getter was woken for a key it will not take: pass the wake-up on.
                    if self._queue:
                        self._wake_one_getter()
                else:
                    self._getters.remove(waiter)
                raise
        if not self._queue:
            return None, True
        return self._take(), False

    def get_nowait(self) -> K | None:
        """Hand out the next key if one is waiting right now, else None. The caller must call :meth:`done`."""
        return self._take() if self._queue else None

    def done(self, key: K) -> None:
        """Mark ``key`` as processed; if it was added again meanwhile, queue it again.

        Raises:
            ValueError: ``key`` is not being processed (a second ``done``, or one without ``get``).
        """
        if key not in self._processing:
            raise ValueError(f"done({key!r}): the key is not being processed")
        self._metrics.done(key)
        self._processing.remove(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one_getter()
        self._wake_watchers()

    def shutdown(self) -> None:
        """Ignore every later add. Keys already queued are still handed out; then :meth:`get`
        returns ``(None, True)``. Also stops a :meth:`shutdown_with_drain` from waiting any longer.
        """
        self._draining = False
        self._begin_shutdown()

    async def shutdown_with_drain(self) -> None:
        """Like :meth:`shutdown`, then wait until every key queued or in flight has been processed
        (including keys re-added while in flight). Workers must go on calling :meth:`get` and
        :meth:`done`; a :meth:`shutdown` call from elsewhere ends the wait early.
        """
        self._draining = True
        self._begin_shutdown()
        await anyio.lowlevel.checkpoint()
        while self._draining and (self._dirty or self._processing):
            await self._wait_for_change()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def processing_keys(self) -> frozenset[K]:
        """The keys workers hold right now (between :meth:`get` and :meth:`done`)."""
        return frozenset(self._processing)

    @property
    def idle(self) -> bool:
        """True when no key is queued or being processed (subclasses add: or waiting for a delay)."""
        return not self._dirty and not self._processing

    async def wait_idle(self) -> None:
        """Return once :attr:`idle` is true (at once if it is now)."""
        await anyio.lowlevel.checkpoint()
        await self._wait_until(lambda: self.idle)

    async def wait_shutdown(self) -> None:
        """Return once :meth:`shutdown` or :meth:`shutdown_with_drain` has been called."""
        await anyio.lowlevel.checkpoint()
        await self._wait_until(lambda: self._shutting_down)

    # -- internals shared with the subclasses ---------------------------------------------------

    def _take(self) -> K:
        key = self._queue.popleft()
        self._metrics.get(key)
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        self._on_shutdown()
        getters, self._getters = self._getters, deque()
        for getter in getters:
            getter.set()
        self._wake_watchers()

    def _on_shutdown(self) -> None:
        """Hook for subclasses: release what they hold when the queue starts shutting down."""

    def _wake_one_getter(self) -> None:
        if self._getters:
            self._getters.popleft().set()

    def _wake_watchers(self) -> None:
        if self._watchers:
            watchers, self._watchers = self._watchers, []
            for watcher in watchers:
                watcher.set()

    async def _wait_for_change(self) -> None:
        watcher = anyio.Event()
        self._watchers.append(watcher)
        try:
            await watcher.wait()
        finally:
            if not watcher.is_set():
                self._watchers.remove(watcher)

    async def _wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._wait_for_change()
