"""The rate-limiting queue on a fake clock, mirroring client-go's rate_limiting_queue_test.go."""

from __future__ import annotations

import anyio
import pytest

from learnerd.runtime.workqueue import FakeClock, ItemExponentialFailureRateLimiter, RateLimitingQueue
from tests.unit.async_helpers import settle

pytestmark = pytest.mark.anyio


async def test_rate_limiting_queue_delays_by_the_limiter() -> None:
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(
        rate_limiter=ItemExponentialFailureRateLimiter(0.001, 1.0), clock=clock
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        assert q.add_rate_limited("one") == 0.001
        assert q.add_rate_limited("one") == 0.002  # still waiting: the earlier (1 ms) time stays
        assert q.num_requeues("one") == 2
        assert q.add_rate_limited("two") == 0.001
        assert q.add_rate_limited("two") == 0.002
        await settle()
        clock.step(0.0009)
        await settle()
        assert len(q) == 0
        clock.step(0.0001)
        await settle()
        assert len(q) == 2
        assert q.num_waiting == 0

        q.forget("one")
        assert q.num_requeues("one") == 0
        assert q.num_requeues("two") == 2
        assert q.add_rate_limited("one") == 0.001
        q.shutdown()


async def test_default_limiter_runs_on_the_queue_clock() -> None:
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=clock)
    assert [q.add_rate_limited("k") for _ in range(3)] == [0.005, 0.010, 0.020]
    for i in range(97):  # spend the rest of the burst of 100
        q.add_rate_limited(f"other-{i}")
    assert q.add_rate_limited("late") == pytest.approx(0.1)
    clock.step(1.0)  # the bucket refills on the queue's (fake) clock
    assert q.add_rate_limited("later") == 0.005


async def test_add_rate_limited_is_ignored_after_shutdown() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue(clock=FakeClock())
    q.shutdown()
    q.add_rate_limited("k")
    assert q.num_waiting == 0
    assert len(q) == 0
