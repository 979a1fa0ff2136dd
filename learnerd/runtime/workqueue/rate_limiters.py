"""Rate limiters: how long a key waits before a rate-limited requeue (client-go's ``default_rate_limiters.go``).

Every limiter answers three calls about a key: :meth:`~RateLimiter.when` (record one more requeue
and return its delay in seconds), :meth:`~RateLimiter.forget` (stop tracking the key: it succeeded,
or was given up) and :meth:`~RateLimiter.num_requeues` (failures recorded since the last forget).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from learnerd.runtime.workqueue.clock import Clock, RealClock

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[K_contra]):
    """Decides how long a key waits before its next rate-limited requeue."""

    def when(self, item: K_contra) -> float:
        """Record one more requeue of ``item``; return how many seconds it should wait (>= 0)."""
        ...

    def forget(self, item: K_contra) -> None:
        """Stop tracking ``item`` (after a success or when giving up on it)."""
        ...

    def num_requeues(self, item: K_contra) -> int:
        """How many requeues of ``item`` were recorded since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per-key exponential backoff: the n-th ``when`` (n = 0, 1, …) of a key returns
    ``min(base_delay * 2**n, max_delay)`` seconds; ``forget`` starts the key over at ``base_delay``.

    client-go's ``ItemExponentialFailureRateLimiter``; its controller default is 5 ms … 1000 s, which
    gives 0.005, 0.01, 0.02, … 655.36, then 1000 s for every later failure.

    Args:
        base_delay: seconds of the first delay, >= 0.
        max_delay: the cap in seconds, >= ``base_delay``.

    Raises:
        ValueError: the delays are negative or ``max_delay < base_delay``.
    """

    def __init__(self, base_delay: float, max_delay: float) -> None:
        if not 0 <= base_delay <= max_delay:
            raise ValueError(f"need 0 <= base_delay <= max_delay, not {base_delay} and {max_delay}")
        self._base_delay = float(base_delay)
        self._max_delay = float(max_delay)
        self._failures: dict[K, int] = {}

    def when(self, item: K) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        try:
            backoff = math.ldexp(self._base_delay, exponent)  # base * 2**exponent, exact in binary
        except OverflowError:
            return self._max_delay
        return min(backoff, self._max_delay)

    def forget(self, item: K) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: K) -> int:
        return self._failures.get(item, 0)

    @property
    def base_delay(self) -> float:
        return self._base_delay

    @property
    def max_delay(self) -> float:
        return self._max_delay

    def set_delays(self, base_delay: float, max_delay: float) -> None:
        """Change the delays (a config reload); the failure counts of keys are kept, so a key's
        next delay is ``min(base_delay * 2**n, max_delay)`` with its ``n`` so far.

        Raises:
            ValueError: as for the constructor.
        """
        if not 0 <= base_delay <= max_delay:
            raise ValueError(f"need 0 <= base_delay <= max_delay, not {base_delay} and {max_delay}")
        self._base_delay = float(base_delay)
        self._max_delay = float(max_delay)


class BucketRateLimiter(Generic[K]):
    """One token bucket shared by every key, with the reservation semantics of ``golang.org/x/time/rate``.

    The bucket holds at most ``burst`` tokens, starts full and refills at ``qps`` tokens per second.
    Each ``when`` reserves one token, whether or not one is there: the count may go negative, and the
    delay returned is how long the refill takes to pay the debt back (``-tokens / qps`` seconds). So a
    burst of calls is spread ``1 / qps`` seconds apart once the bucket is empty. Keys are not tracked:
    ``forget`` does nothing and ``num_requeues`` is always 0 (client-go's ``BucketRateLimiter``).

    Args:
        qps: refill rate in tokens per second, > 0.
        burst: bucket size in tokens, >= 1.
        clock: the clock the refill is measured on; the queue's own.

    Raises:
        ValueError: ``qps <= 0`` or ``burst < 1``.
    """

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, not qps={qps} burst={burst}")
        self._qps = float(qps)
        self._burst = burst
        self._clock = clock if clock is not None else RealClock()
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, item: K) -> float:
        self._advance()
        self._tokens -= 1.0
        return -self._tokens / self._qps if self._tokens < 0 else 0.0

    def _advance(self) -> None:
        """Refill the bucket up to now at the current rate."""
        now = self._clock.now()
        if self._last is not None and now > self._last:
            self._tokens = min(self._tokens + (now - self._last) * self._qps, float(self._burst))
        self._last = now

    def forget(self, item: K) -> None:
        pass

    def num_requeues(self, item: K) -> int:
        return 0

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return self._burst

    def set_limit(self, qps: float, burst: int) -> None:
        """Change the rate and size (a config reload), as ``rate.Limiter.SetLimit`` / ``SetBurst`` do:
        the tokens are first refilled at the old rate up to now, then capped at the new ``burst``;
        a debt (negative tokens) is kept and paid back at the new rate.

        Raises:
            ValueError: ``qps <= 0`` or ``burst < 1``.
        """
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, not qps={qps} burst={burst}")
        self._advance()
        self._qps = float(qps)
        self._burst = burst
        self._tokens = min(self._tokens, float(burst))


class MaxOfRateLimiter(Generic[K]):
    """Asks every limiter and keeps the longest delay (client-go's ``MaxOfRateLimiter``).

    ``when`` calls every limiter, so a token bucket among them reserves its token each time;
    ``num_requeues`` is the largest count any of them reports; ``forget`` forgets in all of them.

    Raises:
        ValueError: no limiter was given.
    """

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: K) -> float:
        return max([limiter.when(item) for limiter in self._limiters])

    def forget(self, item: K) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


class RateLimiterConfig(Protocol):
    """What :class:`ControllerRateLimiter` reads of its settings (``[workqueue]`` satisfies it)."""

    @property
    def base_delay_s(self) -> float: ...
    @property
    def max_delay_s(self) -> float: ...
    @property
    def qps(self) -> float: ...
    @property
    def burst(self) -> int: ...


@dataclass(frozen=True)
class RateLimiterSettings:
    """Rate-limiter settings; the defaults are client-go's ``DefaultControllerRateLimiter``: a per-key
    backoff of ``base_delay_s`` (seconds) doubling to ``max_delay_s``, and a bucket of ``qps`` tokens
    per second holding at most ``burst``."""

    base_delay_s: float = 0.005
    max_delay_s: float = 1000.0
    qps: float = 10.0
    burst: int = 100


class ControllerRateLimiter(MaxOfRateLimiter[K]):
    """client-go's ``DefaultControllerRateLimiter`` — the max of a per-key exponential backoff
    (:attr:`backoff`) and one token bucket shared by all keys (:attr:`bucket`) — whose settings can
    change while it runs (:meth:`reconfigure`, a config reload).

    Args:
        cfg: the settings (the ``[workqueue]`` config section, or :class:`RateLimiterSettings`).
        clock: the clock of the queue this limiter serves (the bucket refills on it).
    """

    def __init__(self, cfg: RateLimiterConfig, clock: Clock | None = None) -> None:
        self.backoff: ItemExponentialFailureRateLimiter[K] = ItemExponentialFailureRateLimiter(
            cfg.base_delay_s, cfg.max_delay_s
        )
        self.bucket: BucketRateLimiter[K] = BucketRateLimiter(cfg.qps, cfg.burst, clock)
        super().__init__(self.backoff, self.bucket)

    def reconfigure(self, cfg: RateLimiterConfig) -> None:
        """Apply new settings; the keys' failure counts and the bucket's tokens carry over
        (see :meth:`ItemExponentialFailureRateLimiter.set_delays`, :meth:`BucketRateLimiter.set_limit`).

        Raises:
            ValueError: a setting is out of range (nothing is changed then).
        """
        if not 0 <= cfg.base_delay_s <= cfg.max_delay_s or cfg.qps <= 0 or cfg.burst < 1:
            raise ValueError(f"invalid rate-limiter settings: {cfg}")
        self.backoff.set_delays(cfg.base_delay_s, cfg.max_delay_s)
        self.bucket.set_limit(cfg.qps, cfg.burst)

    def settings(self) -> RateLimiterSettings:
        """The settings in effect now."""
        return RateLimiterSettings(
            base_delay_s=self.backoff.base_delay,
            max_delay_s=self.backoff.max_delay,
            qps=self.bucket.qps,
            burst=self.bucket.burst,
        )


def default_controller_rate_limiter(
    cfg: RateLimiterConfig | None = None, clock: Clock | None = None
) -> ControllerRateLimiter[Hashable]:
    """client-go's ``DefaultControllerRateLimiter``: the max of a per-key exponential backoff and a
    token bucket shared by all keys.

    With the defaults of :class:`RateLimiterSettings`: 5 ms doubling to 1000 s per key,
    and 10 requeues per second with bursts of 100 overall.

    Args:
        cfg: the settings (the ``[workqueue]`` config section); None gives :class:`RateLimiterSettings`.
        clock: the clock of the queue this limiter serves (the bucket refills on it).
    """
    return ControllerRateLimiter(cfg if cfg is not None else RateLimiterSettings(), clock)
