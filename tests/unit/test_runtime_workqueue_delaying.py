"""The delaying queue on a fake clock, mirroring client-go's delaying_queue_test.go cases."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from learnerd.runtime.workqueue import DelayingQueue, FakeClock
from tests.unit.async_helpers import settle

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def running(q: DelayingQueue[str]) -> AsyncIterator[DelayingQueue[str]]:
    """Run the queue's timer task for the duration of the block, then shut the queue down."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        await settle()
        yield q
        q.shutdown()


async def step(clock: FakeClock, seconds: float) -> None:
    clock.step(seconds)
    await settle()


async def take(q: DelayingQueue[str]) -> str:
    key = q.get_nowait()
    assert key is not None, "expected a ready key"
    q.done(key)
    return key


async def test_simple_add_after() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("foo", 0.050)
        await settle()
        assert len(q) == 0
        assert q.num_waiting == 1
        await step(clock, 0.060)
        assert len(q) == 1
        assert await take(q) == "foo"
        await step(clock, 10)  # nothing else was waiting
        assert len(q) == 0
        assert q.num_waiting == 0


async def test_later_add_after_does_not_push_back_an_earlier_one() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("foo", 0.050)
        q.add_after("foo", 0.070)
        await settle()
        assert q.num_waiting == 1
        await step(clock, 0.060)
        assert len(q) == 1
        assert await take(q) == "foo"
        await step(clock, 0.020)  # past the 70 ms one: it was never scheduled
        assert len(q) == 0


async def test_earlier_add_after_wins() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("foo", 0.050)
        q.add_after("foo", 0.030)
        await settle()
        assert len(q) == 0
        await step(clock, 0.040)
        assert len(q) == 1
        assert await take(q) == "foo"
        await step(clock, 0.020)  # past the replaced 50 ms entry: it does not fire
        assert len(q) == 0
        assert q.idle


async def test_add_two_fire_early() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("foo", 1.0)
        q.add_after("bar", 0.050)
        await settle()
        assert len(q) == 0
        await step(clock, 0.060)
        assert len(q) == 1
        assert await take(q) == "bar"
        q.add_after("baz", 2.0)
        await step(clock, 1.0)
        assert len(q) == 1
        assert await take(q) == "foo"
        await step(clock, 2.0)
        assert len(q) == 1
        assert await take(q) == "baz"


async def test_copy_shifting() -> None:
    """Keys added in the reverse order of their ready times come out in ready-time order."""
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("foo", 1.0)
        q.add_after("bar", 0.500)
        q.add_after("baz", 0.250)
        await settle()
        assert len(q) == 0
        await step(clock, 2.0)
        assert len(q) == 3
        assert [await take(q) for _ in range(3)] == ["baz", "bar", "foo"]


async def test_heap_order_over_many_keys() -> None:
    rng = random.Random(42)
    delays = {f"k{i}": rng.uniform(0.001, 600.0) for i in range(500)}
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        for key, delay in delays.items():
            q.add_after(key, delay)
        # shorten some: the earlier time must win
        for key in list(delays)[::7]:
            delays[key] /= 3
            q.add_after(key, delays[key])
        await step(clock, 601)
        assert len(q) == len(delays)
        got = [await take(q) for _ in range(len(delays))]
    assert got == sorted(delays, key=delays.__getitem__)


async def test_keys_fire_one_at_a_time_as_the_clock_moves() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        for i, key in enumerate(["a", "b", "c"]):
            q.add_after(key, 10.0 * (i + 1))
        await settle()
        assert clock.sleepers == 1, "one timer task serves every delay"
        for expected in ["a", "b", "c"]:
            await step(clock, 9.999)
            assert len(q) == 0
            await step(clock, 0.001)
            assert await take(q) == expected


async def test_add_after_with_no_delay_adds_at_once() -> None:
    q: DelayingQueue[str] = DelayingQueue(clock=FakeClock())  # no timer needed for these
    q.add_after("zero", 0)
    q.add_after("negative", -5)
    assert len(q) == 2
    assert q.num_waiting == 0


async def test_keys_added_before_the_timer_starts_wait_for_it() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("early", 1.0)
    clock.step(5.0)
    assert len(q) == 0
    async with running(q):
        assert len(q) == 1


async def test_shutdown_drops_waiting_keys_and_stops_the_timer() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        q.add_after("later", 60)
        await settle()
        assert not q.idle
        q.shutdown()
    # the task group exited: run() returned
    assert q.num_waiting == 0
    assert q.idle
    assert clock.sleepers == 0
    q.add_after("ignored", 1)
    q.add_after("ignored", 0)
    assert q.num_waiting == 0
    assert len(q) == 0


async def test_idle_waits_for_delayed_keys() -> None:
    clock = FakeClock()
    async with running(DelayingQueue(clock=clock)) as q:
        q.add_after("a", 5)
        assert not q.idle
        idle = anyio.Event()

        async def waiter() -> None:
            await q.wait_idle()
            idle.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await step(clock, 5)
            assert not idle.is_set()
            await take(q)
        assert idle.is_set()


async def test_running_the_timer_twice_is_refused() -> None:
    q: DelayingQueue[str] = DelayingQueue(clock=FakeClock())
    async with running(q):
        with pytest.raises(RuntimeError, match="already running"):
            await q.run()


async def test_real_clock_add_after() -> None:
    """One short real delay, to check the timer against anyio's own sleep."""
    async with running(DelayingQueue()) as q:
        q.add_after("real", 0.02)
        with anyio.fail_after(5):
            key, _ = await q.get()
        assert key == "real"
        q.done(key)
