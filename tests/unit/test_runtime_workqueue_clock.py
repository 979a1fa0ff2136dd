"""The fake clock the other workqueue tests rely on, and the real one."""

from __future__ import annotations

import anyio
import pytest

from learnerd.runtime.workqueue import Clock, FakeClock, RealClock
from tests.unit.async_helpers import settle

pytestmark = pytest.mark.anyio


async def test_fake_clock_wakes_sleepers_in_deadline_order_when_stepped() -> None:
    clock = FakeClock(start=10.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "late", 5.0)
        tg.start_soon(sleeper, "early", 1.0)
        await settle()
        assert clock.sleepers == 2
        clock.step(0.5)
        await settle()
        assert woke == []
        clock.step(5.0)
        await settle()
    assert woke == [("early", 15.5), ("late", 15.5)]
    assert clock.now() == 15.5


async def test_fake_clock_set_time_and_zero_sleep() -> None:
    clock = FakeClock()
    await clock.sleep(0)  # returns at once, registering nothing
    assert clock.sleepers == 0
    done = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep(30)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await settle()
        clock.set_time(29.9)
        await settle()
        assert not done.is_set()
        clock.set_time(30)
    assert done.is_set()
    clock.set_time(1.0)  # backwards is allowed: only differences mean anything
    assert clock.now() == 1.0
    with pytest.raises(ValueError):
        clock.step(-1)


async def test_cancelled_fake_sleep_leaves_no_sleeper() -> None:
    clock = FakeClock()
    with anyio.move_on_after(0.01):
        await clock.sleep(100)
    assert clock.sleepers == 0


async def test_real_clock_is_monotonic_and_sleeps() -> None:
    clock = RealClock()
    assert isinstance(clock, Clock)
    assert isinstance(FakeClock(), Clock)
    before = clock.now()
    await clock.sleep(0.01)
    assert clock.now() - before >= 0.009
