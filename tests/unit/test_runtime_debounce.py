"""Debouncer: a burst of touches is one fire after the quiet period, never later than max_wait after the
first touch; keys are independent. On a FakeClock."""

from __future__ import annotations

import anyio
import pytest

from learnerd.runtime.debounce import Debouncer
from learnerd.runtime.workqueue import FakeClock
from tests.unit.async_helpers import settle

pytestmark = pytest.mark.anyio


async def run_with(debouncer: Debouncer, body) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(debouncer.run)
        await settle()
        await body()
        tg.cancel_scope.cancel()


async def test_a_burst_fires_once_after_the_quiet_period():
    clock, fired = FakeClock(), []
    debouncer = Debouncer(fired.append, quiet_s=2.0, max_wait_s=60.0, clock=clock)

    async def body():
        for _ in range(5):  # a save every second: the timer keeps moving
            debouncer.touch("a.dlm")
            await settle()
            clock.step(1.0)
            await settle()
        assert fired == [] and debouncer.remaining("a.dlm") == pytest.approx(1.0)
        clock.step(0.5)
        await settle()
        assert fired == []
        clock.step(0.5)
        await settle()
        assert fired == ["a.dlm"] and debouncer.remaining("a.dlm") is None and len(debouncer) == 0
        clock.step(100.0)
        await settle()
        assert fired == ["a.dlm"]

    await run_with(debouncer, body)


async def test_max_wait_bounds_an_endless_burst():
    clock, fired = FakeClock(), []
    debouncer = Debouncer(lambda key: fired.append((key, clock.now())), quiet_s=2.0, max_wait_s=5.0, clock=clock)

    async def body():
        for _ in range(12):  # touched every second, never 2 s of quiet
            debouncer.touch("busy.dlm")
            await settle()
            clock.step(1.0)
            await settle()
        # each burst fires max_wait after its first touch: t=0 -> 5, then t=5 -> 10
        assert fired == [("busy.dlm", 5.0), ("busy.dlm", 10.0)]

    await run_with(debouncer, body)


async def test_keys_fire_independently_in_deadline_order():
    clock, fired = FakeClock(), []
    debouncer = Debouncer(fired.append, quiet_s=2.0, max_wait_s=10.0, clock=clock)

    async def body():
        debouncer.touch("a")
        clock.step(1.0)
        debouncer.touch("b")
        await settle()
        clock.step(1.0)
        await settle()
        assert fired == ["a"]
        clock.step(1.0)
        await settle()
        assert fired == ["a", "b"]

    await run_with(debouncer, body)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        Debouncer(print, quiet_s=0, max_wait_s=1)
    with pytest.raises(ValueError):
        Debouncer(print, quiet_s=5, max_wait_s=1)
