"""The basic workqueue, mirroring client-go's queue_test.go cases."""

from __future__ import annotations

import asyncio
import random

import anyio
import pytest

from learnerd.runtime.workqueue import WorkQueue
from tests.unit.async_helpers import settle, until

pytestmark = pytest.mark.anyio


async def shutdown_plain(q: WorkQueue[object]) -> None:
    q.shutdown()


async def shutdown_draining(q: WorkQueue[object]) -> None:
    await q.shutdown_with_drain()


SHUTDOWNS = [pytest.param(shutdown_plain, id="shutdown"), pytest.param(shutdown_draining, id="shutdown_with_drain")]


async def test_basic_fifo_order() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    got = []
    for _ in range(3):
        key, shutdown = await q.get()
        assert not shutdown
        got.append(key)
        q.done(key)
    assert got == ["a", "b", "c"]


@pytest.mark.parametrize("stop", SHUTDOWNS)
async def test_basic_many_producers_and_consumers(stop) -> None:
    q: WorkQueue[object] = WorkQueue()
    in_flight: set[object] = set()
    processed: list[object] = []
    rng = random.Random(7)

    async def producer(i: int) -> None:
        for _ in range(50):
            q.add(i)
            await anyio.sleep(0)

    async def consumer() -> None:
        while True:
            key, shutdown = await q.get()
            assert key != "added after shutdown!"
            if shutdown:
                return
            assert key not in in_flight, f"{key} handed to two workers at once"
            in_flight.add(key)
            for _ in range(rng.randint(0, 3)):
                await anyio.sleep(0)
            in_flight.discard(key)
            processed.append(key)
            q.done(key)

    async with anyio.create_task_group() as consumers:
        for _ in range(10):
            consumers.start_soon(consumer)
        async with anyio.create_task_group() as producers:
            for i in range(50):
                producers.start_soon(producer, i)
        await stop(q)
        q.add("added after shutdown!")
    assert len(q) == 0
    assert set(processed) == set(range(50))


@pytest.mark.parametrize("stop", SHUTDOWNS)
async def test_add_while_processing(stop) -> None:
    """Every key is re-added while it is processing until it has run twice: exactly two runs each."""
    q: WorkQueue[object] = WorkQueue()
    runs: dict[object, int] = {}

    async def consumer() -> None:
        while True:
            key, shutdown = await q.get()
            if shutdown:
                return
            runs[key] = runs.get(key, 0) + 1
            if runs[key] < 2:
                q.add(key)
            await anyio.sleep(0)
            q.done(key)

    for i in range(50):
        q.add(i)
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(consumer)
        await until(lambda: q.idle)
        await stop(q)
    assert len(q) == 0
    assert runs == {i: 2 for i in range(50)}


async def test_len() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    assert len(q) == 1
    q.add("bar")
    assert len(q) == 2
    q.add("foo")  # already queued: no second entry
    assert len(q) == 2


async def test_reinsert() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    key, _ = await q.get()
    assert key == "foo"
    q.add(key)  # added back while processing
    assert len(q) == 0  # not queued until done
    q.done(key)
    key, _ = await q.get()
    assert key == "foo"
    q.done(key)
    assert len(q) == 0


async def test_collapse() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("bar")
    q.add("bar")
    key, _ = await q.get()
    assert key == "bar"
    q.done(key)
    assert len(q) == 0
    assert q.get_nowait() is None


async def test_collapse_while_processing() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    first, _ = await q.get()
    q.add("foo")
    q.add("foo")
    second: list[str | None] = []

    async def other_worker() -> None:
        key, _ = await q.get()
        second.append(key)
        q.done(key)

    async with anyio.create_task_group() as tg:
        tg.start_soon(other_worker)
        await settle()
        assert second == [], "the other worker must wait until the first one is done"
        q.done(first)
    assert second == ["foo"]
    assert len(q) == 0
    assert q.idle


async def test_shutdown_hands_out_queued_items_then_reports_shutdown() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    q.shutdown()
    q.add("c")  # ignored
    assert q.shutting_down
    assert await q.get() == ("a", False)
    assert await q.get() == ("b", False)
    assert await q.get() == (None, True)
    q.done("a")
    q.done("b")
    assert await q.get() == (None, True)


async def test_shutdown_releases_blocked_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    results: list[tuple[str | None, bool]] = []

    async def worker() -> None:
        results.append(await q.get())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(worker)
        await settle()
        assert results == []
        q.shutdown()
    assert results == [(None, True)] * 3


async def test_queue_drainage_using_shutdown_with_drain() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    q.add("bar")
    first, _ = await q.get()
    second, _ = await q.get()
    drained = anyio.Event()

    async def drain() -> None:
        await q.shutdown_with_drain()
        drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await settle()
        assert await q.get() == (None, True)
        q.done(first)
        await settle()
        assert not drained.is_set(), "drain returned while a key was still in flight"
        q.done(second)
    assert drained.is_set()


async def test_queue_drainage_using_shutdown_with_drain_with_dirty_item() -> None:
    """The drain also waits for a key that was re-added while it was processing."""
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    gotten, _ = await q.get()
    q.add("foo")
    drained = anyio.Event()

    async def drain() -> None:
        await q.shutdown_with_drain()
        drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await settle()
        assert await q.get() == (None, True)  # nothing queued: foo is dirty but still processing
        q.done(gotten)  # foo goes back into the queue
        await settle()
        assert not drained.is_set()
        again, shutdown = await q.get()
        assert (again, shutdown) == ("foo", False)
        await settle()
        assert not drained.is_set()
        q.done(again)
    assert drained.is_set()
    assert await q.get() == (None, True)


async def test_no_queue_drainage_using_shutdown() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    q.add("bar")
    await q.get()
    await q.get()
    q.shutdown()  # returns at once although two keys are in flight
    assert q.processing_keys() == {"foo", "bar"}


async def test_force_queue_shutdown_using_shutdown() -> None:
    """A shutdown() ends a shutdown_with_drain() that is still waiting for keys in flight."""
    q: WorkQueue[str] = WorkQueue()
    q.add("foo")
    await q.get()
    drained = anyio.Event()

    async def drain() -> None:
        await q.shutdown_with_drain()
        drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await settle()
        assert not drained.is_set()
        q.shutdown()
    assert drained.is_set()
    assert q.processing_keys() == {"foo"}


async def test_cancelled_get_takes_no_key() -> None:
    q: WorkQueue[str] = WorkQueue()
    with anyio.move_on_after(0.01):
        await q.get()
    q.add("a")
    assert len(q) == 1
    assert await q.get() == ("a", False)


async def test_woken_getter_that_is_cancelled_passes_the_key_on() -> None:
    """asyncio's Task.cancel() can land after a getter was woken for a key: the next getter gets it.

    (anyio's own cancel scopes never interrupt a task whose wait has completed, so this path is
    only reachable through plain asyncio cancellation, e.g. ``asyncio.wait_for``.)
    """
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.ensure_future(q.get())
    await settle()
    second = asyncio.ensure_future(q.get())
    await settle()
    q.add("a")  # wakes the first getter...
    first.cancel()  # ...which is cancelled before it runs
    with anyio.fail_after(5):
        assert await second == ("a", False)
    assert first.cancelled()
    assert q.processing_keys() == {"a"}


async def test_done_of_a_key_not_processing_raises() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    with pytest.raises(ValueError, match="not being processed"):
        q.done("a")
    key, _ = await q.get()
    q.done(key)
    with pytest.raises(ValueError):
        q.done(key)


async def test_get_nowait_hands_out_only_ready_keys() -> None:
    q: WorkQueue[str] = WorkQueue()
    assert q.get_nowait() is None
    q.add("a")
    q.add("b")
    assert q.get_nowait() == "a"
    q.add("a")  # dirty while processing: not ready
    assert q.get_nowait() == "b"
    assert q.get_nowait() is None
    assert q.processing_keys() == {"a", "b"}


async def test_idle_and_wait_idle() -> None:
    q: WorkQueue[str] = WorkQueue()
    assert q.idle
    await q.wait_idle()  # returns at once
    q.add("a")
    assert not q.idle
    became_idle = anyio.Event()

    async def waiter() -> None:
        await q.wait_idle()
        became_idle.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        key, _ = await q.get()
        q.add("a")  # one more run after done
        await settle()
        assert not q.idle
        q.done(key)
        await settle()
        assert not became_idle.is_set()
        key, _ = await q.get()
        q.done(key)
    assert became_idle.is_set()
    assert q.idle


async def test_wait_shutdown() -> None:
    q: WorkQueue[str] = WorkQueue()
    seen = anyio.Event()

    async def waiter() -> None:
        await q.wait_shutdown()
        seen.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await settle()
        assert not seen.is_set()
        q.shutdown()
    assert seen.is_set()


async def test_a_queue_is_truthy_even_when_empty() -> None:
    q: WorkQueue[str] = WorkQueue()
    assert len(q) == 0
    assert bool(q) is True
