"""Changing rate-limiter and controller settings while they run (a config reload)."""

from __future__ import annotations

import pytest

from learnerd.runtime.controller import Controller
from learnerd.runtime.reconcile import Result
from learnerd.runtime.workqueue import (
    BucketRateLimiter,
    ControllerRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    RateLimiterSettings,
    RateLimitingQueue,
    default_controller_rate_limiter,
)


def test_new_delays_apply_to_the_failures_already_counted() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    assert [limiter.when("k") for _ in range(3)] == [0.005, 0.01, 0.02]
    limiter.set_delays(1.0, 10.0)
    assert limiter.num_requeues("k") == 3, "the key's failure count survives"
    assert [limiter.when("k") for _ in range(2)] == [8.0, 10.0]  # 1 * 2**3, then capped
    assert limiter.when("other") == 1.0
    with pytest.raises(ValueError):
        limiter.set_delays(2.0, 1.0)
    assert (limiter.base_delay, limiter.max_delay) == (1.0, 10.0)


def test_new_rate_refills_from_now_and_keeps_the_debt() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(qps=1.0, burst=2, clock=clock)
    assert [bucket.when("x") for _ in range(4)] == [0.0, 0.0, 1.0, 2.0]  # two tokens of debt
    clock.step(1.0)  # refilled at the old rate: one token back, debt 1
    bucket.set_limit(qps=10.0, burst=5)
    assert (bucket.qps, bucket.burst) == (10.0, 5)
    assert bucket.when("x") == pytest.approx(0.2)  # debt 2 paid back at 10 qps
    clock.step(10.0)
    assert [bucket.when("x") for _ in range(6)] == [0.0] * 5 + [pytest.approx(0.1)], "the new burst"


def test_a_smaller_burst_caps_the_tokens_at_once() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(qps=1.0, burst=100, clock=clock)
    bucket.set_limit(qps=1.0, burst=2)
    assert [bucket.when("x") for _ in range(3)] == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError):
        bucket.set_limit(qps=0.0, burst=1)


def test_controller_rate_limiter_reports_and_changes_its_settings() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(RateLimiterSettings(), clock)
    assert isinstance(limiter, ControllerRateLimiter)
    assert limiter.settings() == RateLimiterSettings()
    limiter.when("k")
    new = RateLimiterSettings(base_delay_s=0.5, max_delay_s=60.0, qps=2.0, burst=3)
    limiter.reconfigure(new)
    assert limiter.settings() == new
    assert limiter.when("k") == 1.0, "max(0.5 * 2**1, bucket)"
    with pytest.raises(ValueError):
        limiter.reconfigure(RateLimiterSettings(qps=-1.0))
    assert limiter.settings() == new, "an invalid setting changes nothing"


def test_the_queue_exposes_its_limiter() -> None:
    limiter = default_controller_rate_limiter()
    queue: RateLimitingQueue[str] = RateLimitingQueue("q", rate_limiter=limiter)
    assert queue.rate_limiter is limiter


class _Noop:
    name = "noop"

    async def reconcile(self, key: str) -> Result:
        return Result()


def test_controller_timeout_and_retries_change_live() -> None:
    controller = Controller(_Noop(), RateLimitingQueue("noop"), timeout_s=60.0, max_retries=15)
    controller.configure(timeout_s=5.0, max_retries=3)
    assert (controller.timeout_s, controller.max_retries) == (5.0, 3)
    with pytest.raises(ValueError):
        controller.configure(timeout_s=0.0, max_retries=3)
    assert controller.timeout_s == 5.0
