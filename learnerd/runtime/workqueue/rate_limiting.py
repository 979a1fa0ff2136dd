"""The rate-limiting queue: requeues a failed key after its rate limiter's delay (client-go's
``rate_limiting_queue.go``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from learnerd.runtime.workqueue.clock import Clock
from learnerd.runtime.workqueue.delaying import DelayingQueue
from learnerd.runtime.workqueue.metrics import MetricsProvider
from learnerd.runtime.workqueue.rate_limiters import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)


class RateLimitingQueue(DelayingQueue[K]):
    """A :class:`~.delaying.DelayingQueue` whose :meth:`add_rate_limited` asks a rate limiter for the delay.

    Call :meth:`forget` once a key succeeds or is given up, or its backoff keeps growing; ``forget``
    only resets the limiter: the worker still calls :meth:`done`.

    Args:
        name, clock, metrics: as for :class:`~.queue.WorkQueue`.
        rate_limiter: the limiter of this queue;
            :func:`~.rate_limiters.default_controller_rate_limiter` on ``clock`` by default.
    """

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter[K] | None = None,
        clock: Clock | None = None,
        metrics: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name, clock=clock, metrics=metrics)
        self._rate_limiter: RateLimiter[K] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=self._clock)
        )

    @property
    def rate_limiter(self) -> RateLimiter[K]:
        """The limiter of this queue (the daemon reconfigures it on a config reload)."""
        return self._rate_limiter

    def add_rate_limited(self, key: K) -> float:
        """``add_after(key, rate_limiter.when(key))``: records one more requeue of ``key`` and schedules it.

        Returns:
            the delay in seconds the limiter chose (also when the queue is shutting down and the
            add is ignored).
        """
        delay = self._rate_limiter.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset the limiter's record of ``key`` (its next failure starts at the base delay again)."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited requeues of ``key`` the limiter has recorded since it was last forgotten."""
        return self._rate_limiter.num_requeues(key)
