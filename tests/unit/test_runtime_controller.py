"""The controller: outcomes → queue operations, workers that survive anything, batches, pause, logs, metrics.

The queue runs on a FakeClock, so backoff and requeue_after delays are checked exactly and instantly;
only the per-reconcile timeout is wall-clock (by design) and is tested with a 50 ms limit.
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
import structlog
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from learnerd.runtime.controller import Controller
from learnerd.runtime.controller_metrics import ControllerMetrics
from learnerd.runtime.reconcile import BatchReconciler, Reconciler, Result, TerminalError
from learnerd.runtime.workqueue import FakeClock, RateLimitingQueue
from tests.unit.async_helpers import settle, until

pytestmark = pytest.mark.anyio

Step = Result | BaseException | object | Callable[[], Awaitable[Result]]


class ScriptedReconciler:
    """Reconciles by script: each key's list of steps is consumed one per call (then ``Result()``).

    A step is a value to return, an exception to raise, or a coroutine function to await.
    """

    def __init__(self, name: str = "scripted", clock: FakeClock | None = None) -> None:
        self.name = name
        self.clock = clock
        self.calls: list[str] = []
        self.call_times: list[float] = []
        self.script: dict[str, list[Step]] = {}
        self.changes: Counter[str] = Counter()

    def resync_keys(self) -> list[str]:
        return sorted(self.script)

    async def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        if self.clock is not None:
            self.call_times.append(self.clock.now())
        await anyio.lowlevel.checkpoint()
        steps = self.script.get(key)
        step = steps.pop(0) if steps else Result()
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return await step()
        return step  # type: ignore[return-value]


class RecordingBatchReconciler:
    """Returns the scripted outcome of each key (first call per key only); records every batch."""

    name = "batched"

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.batches: list[list[str]] = []
        self.first_outcomes: dict[str, object] = {}
        self.raise_next: BaseException | None = None
        self.changes: Counter[str] = Counter()

    def resync_keys(self) -> list[str]:
        return []

    async def reconcile(self, key: str) -> Result:
        raise AssertionError("a batch reconciler must be called through reconcile_batch")

    async def reconcile_batch(self, keys: Sequence[str]) -> Mapping[str, Result | BaseException]:
        self.batches.append(list(keys))
        await anyio.lowlevel.checkpoint()
        if self.raise_next is not None:
            exc, self.raise_next = self.raise_next, None
            raise exc
        out: dict[str, object] = {}
        for key in keys:
            outcome = self.first_outcomes.pop(key, Result())
            if outcome is not MISSING:
                out[key] = outcome
        return out  # type: ignore[return-value]


MISSING = object()


def make_controller(
    reconciler: Reconciler, clock: FakeClock, registry: CollectorRegistry | None = None, **kwargs: object
) -> Controller:
    queue: RateLimitingQueue[str] = RateLimitingQueue(reconciler.name, clock=clock)
    metrics = ControllerMetrics(registry) if registry is not None else None
    return Controller(reconciler, queue, metrics=metrics, **kwargs)  # type: ignore[arg-type]


@asynccontextmanager
async def running(controller: Controller) -> AsyncIterator[Controller]:
    """Run the controller for the block; then shut its queue down and wait for run() to return."""
    returned = anyio.Event()

    async def run() -> None:
        await controller.run()
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await settle()
        yield controller
        controller.queue.shutdown()
    assert returned.is_set()


async def test_reconcilers_satisfy_the_contract_protocols() -> None:
    assert isinstance(ScriptedReconciler(), Reconciler)
    assert not isinstance(ScriptedReconciler(), BatchReconciler)
    assert isinstance(RecordingBatchReconciler(4), BatchReconciler)


async def test_success_forgets_the_key() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["a"] = [RuntimeError("first try fails")]
    controller = make_controller(reconciler, clock)
    async with running(controller):
        controller.queue.add("a")
        await settle()
        assert controller.queue.num_requeues("a") == 1
        clock.step(0.005)
        await settle()
        assert reconciler.calls == ["a", "a"]
        assert controller.queue.num_requeues("a") == 0  # forgotten after the success
        stats = controller.stats()
        assert (stats.reconciles, stats.failures, stats.retries, stats.dropped) == (2, 1, 1, 0)


async def test_requeue_after_is_honoured_on_the_clock() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["a"] = [RuntimeError("fail once"), Result(requeue_after=30.0)]
    controller = make_controller(reconciler, clock)
    async with running(controller):
        controller.queue.add("a")
        await settle()
        clock.step(0.005)
        await settle()
        assert reconciler.calls == ["a", "a"]
        assert controller.queue.num_requeues("a") == 0  # requeue_after forgets the failure history
        assert controller.queue.num_waiting == 1
        clock.step(29.999)
        await settle()
        assert reconciler.calls == ["a", "a"]
        clock.step(0.001)
        await settle()
        assert reconciler.calls == ["a", "a", "a"]
        assert controller.queue.idle


async def test_terminal_error_is_not_retried() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["bad"] = [TerminalError("refused: malformed document")]
    controller = make_controller(reconciler, clock)
    async with running(controller):
        controller.queue.add("bad")
        await settle()
        clock.step(10_000)
        await settle()
        assert reconciler.calls == ["bad"]
        assert controller.queue.num_requeues("bad") == 0
        assert controller.queue.idle
        stats = controller.stats()
        assert (stats.terminal, stats.failures, stats.retries) == (1, 0, 0)
        assert stats.last_error is not None
        assert stats.last_error.key == "bad"
        assert stats.last_error.message == "TerminalError: refused: malformed document"


async def test_exception_is_retried_with_exponential_backoff_then_dropped() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["flaky"] = [ValueError(f"failure {i}") for i in range(100)]
    controller = make_controller(reconciler, clock, max_retries=3)
    async with running(controller):
        controller.queue.add("flaky")
        await settle()
        for expected_delay in (0.005, 0.010, 0.020):
            calls = len(reconciler.calls)
            last = reconciler.call_times[-1]
            clock.set_time(last + expected_delay - 1e-6)
            await settle()
            assert len(reconciler.calls) == calls, f"retried before its {expected_delay} s backoff"
            clock.set_time(last + expected_delay + 1e-6)
            await settle()
            assert len(reconciler.calls) == calls + 1, f"not retried after its {expected_delay} s backoff"
        clock.step(10_000)
        await settle()
        assert len(reconciler.calls) == 4  # the first try and max_retries retries, then dropped
        assert controller.queue.num_requeues("flaky") == 0
        assert controller.queue.idle
        stats = controller.stats()
        assert (stats.failures, stats.retries, stats.dropped) == (4, 3, 1)
        assert stats.last_error is not None
        assert stats.last_error.message == "ValueError: failure 3"


async def test_max_retries_zero_drops_at_the_first_failure() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["k"] = [ValueError("no")]
    controller = make_controller(reconciler, clock, max_retries=0)
    async with running(controller):
        controller.queue.add("k")
        await settle()
        clock.step(100)
        await settle()
        assert reconciler.calls == ["k"]
        assert controller.stats().dropped == 1


async def test_timeout_counts_as_a_failure() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["slow"] = [anyio.sleep_forever]
    controller = make_controller(reconciler, clock, registry, timeout_s=0.05)
    async with running(controller):
        controller.queue.add("slow")
        with anyio.fail_after(5):
            while controller.stats().failures == 0:
                await anyio.sleep(0.01)  # the timeout is wall-clock
        stats = controller.stats()
        assert stats.retries == 1
        assert stats.last_error is not None
        assert stats.last_error.message == "reconcile timed out after 0.05 s"
        assert (
            registry.get_sample_value("learnerd_reconcile_total", {"controller": "scripted", "result": "timeout"}) == 1
        )
        clock.step(0.005)
        await until(lambda: len(reconciler.calls) == 2 and controller.queue.idle)
        assert controller.queue.num_requeues("slow") == 0


async def test_a_raising_reconciler_never_kills_the_worker() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    reconciler.script["raises"] = [RuntimeError("boom"), KeyError("gone"), ZeroDivisionError()]
    reconciler.script["returns-junk"] = [None, "not a result"]
    controller = make_controller(reconciler, clock, workers=1, max_retries=1)
    async with running(controller):
        for key in ("raises", "returns-junk", "fine-1", "fine-2"):
            controller.queue.add(key)
        await settle()
        clock.step(1)
        await settle()
        clock.step(1)
        await settle()
        controller.queue.add("after")
        await settle()
        assert reconciler.calls == ["raises", "returns-junk", "fine-1", "fine-2", "raises", "returns-junk", "after"]
        stats = controller.stats()
        assert (stats.failures, stats.dropped) == (4, 2)
        assert stats.last_error is not None
        assert (
            stats.last_error.message
            == "TypeError: reconcile returned 'not a result', not a learnerd.runtime.reconcile.Result"
        )


async def test_a_key_is_never_reconciled_concurrently() -> None:
    clock = FakeClock()
    rng = random.Random(3)
    in_flight: set[str] = set()
    overlaps: list[str] = []
    most_at_once = 0
    runs: dict[str, int] = {}

    class Overlapping(ScriptedReconciler):
        async def reconcile(self, key: str) -> Result:
            nonlocal most_at_once
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            most_at_once = max(most_at_once, len(in_flight))
            runs[key] = runs.get(key, 0) + 1
            for _ in range(rng.randint(1, 5)):
                await anyio.lowlevel.checkpoint()
            in_flight.discard(key)
            return Result()

    controller = make_controller(Overlapping(), clock, workers=8)
    async with running(controller):
        for _ in range(500):
            controller.queue.add(f"k{rng.randrange(10)}")
            if rng.random() < 0.5:
                await anyio.lowlevel.checkpoint()
        await controller.queue.wait_idle()
    assert overlaps == []
    assert most_at_once > 1, "the workers never ran in parallel: the test proves nothing"
    assert set(runs) == {f"k{i}" for i in range(10)}


async def test_adds_during_processing_collapse_into_one_more_run() -> None:
    clock = FakeClock()
    gate = anyio.Event()
    reconciler = ScriptedReconciler(clock=clock)

    async def blocked() -> Result:
        await gate.wait()
        return Result()

    reconciler.script["a"] = [blocked]
    controller = make_controller(reconciler, clock, workers=4)
    async with running(controller):
        controller.queue.add("a")
        await settle()
        for _ in range(5):
            controller.queue.add("a")
        await settle()
        assert reconciler.calls == ["a"], "a second worker took a key that was being reconciled"
        assert controller.stats().in_flight == ("a",)
        gate.set()
        await controller.queue.wait_idle()
    assert reconciler.calls == ["a", "a"]


async def test_batch_reconciler_gets_up_to_batch_size_ready_keys_and_per_key_outcomes() -> None:
    clock = FakeClock()
    reconciler = RecordingBatchReconciler(batch_size=4)
    reconciler.first_outcomes = {
        "k1": Result(),
        "k2": TerminalError("refused"),
        "k3": ValueError("failed alone"),
        "k4": MISSING,  # no outcome returned: counts as failed
        "k5": Result(requeue_after=10.0),
        "k6": "not a result",
    }
    controller = make_controller(reconciler, clock, workers=1)
    queue = controller.queue
    for i in range(1, 7):
        queue.add(f"k{i}")
    async with running(controller):
        await settle()
        assert reconciler.batches == [["k1", "k2", "k3", "k4"], ["k5", "k6"]]
        stats = controller.stats()
        assert (stats.reconciles, stats.terminal, stats.failures, stats.retries) == (6, 1, 3, 3)
        assert {k: queue.num_requeues(k) for k in ("k1", "k2", "k3", "k4", "k5", "k6")} == {
            "k1": 0,
            "k2": 0,
            "k3": 1,
            "k4": 1,
            "k5": 0,
            "k6": 1,
        }
        assert queue.num_waiting == 4
        clock.step(0.005)  # the three failures come back together
        await settle()
        assert reconciler.batches[2:] == [["k3", "k4", "k6"]]
        assert all(queue.num_requeues(k) == 0 for k in ("k3", "k4", "k6"))
        clock.step(10)
        await settle()
        assert reconciler.batches[3:] == [["k5"]]
        assert queue.idle


async def test_a_raising_batch_call_fails_every_key_of_the_batch() -> None:
    clock = FakeClock()
    reconciler = RecordingBatchReconciler(batch_size=8)
    reconciler.raise_next = OSError("embedding server down")
    controller = make_controller(reconciler, clock, workers=1)
    for key in ("a", "b", "c"):
        controller.queue.add(key)
    async with running(controller):
        await settle()
        assert controller.stats().failures == 3
        assert [controller.queue.num_requeues(k) for k in "abc"] == [1, 1, 1]
        clock.step(0.005)
        await settle()
        assert reconciler.batches == [["a", "b", "c"], ["a", "b", "c"]]
        assert controller.queue.idle


async def test_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        make_controller(RecordingBatchReconciler(batch_size=0), FakeClock())


async def test_pause_stops_taking_keys_and_resume_restarts() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    controller = make_controller(reconciler, clock, workers=2)
    async with running(controller):  # the workers are now waiting in get()
        controller.pause()
        assert controller.paused
        controller.queue.add("a")
        controller.queue.add("b")
        await settle()
        assert reconciler.calls == []
        assert controller.stats().queue_depth == 2
        controller.resume()
        await settle()
        assert sorted(reconciler.calls) == ["a", "b"]
        assert not controller.stats().paused


async def test_pause_lets_the_reconcile_in_flight_finish() -> None:
    clock = FakeClock()
    gate = anyio.Event()
    reconciler = ScriptedReconciler(clock=clock)

    async def blocked() -> Result:
        await gate.wait()
        return Result()

    reconciler.script["first"] = [blocked]
    controller = make_controller(reconciler, clock, workers=1)
    async with running(controller):
        controller.queue.add("first")
        controller.queue.add("second")
        await settle()
        controller.pause()
        gate.set()
        await settle()
        assert reconciler.calls == ["first"]
        assert controller.stats().reconciles == 1
        assert controller.stats().in_flight == ()
        assert len(controller.queue) == 1
        controller.resume()
        await settle()
        assert reconciler.calls == ["first", "second"]


async def test_a_paused_controller_starts_nothing_when_shut_down_and_run_returns() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    controller = make_controller(reconciler, clock)
    controller.pause()
    async with running(controller):
        controller.queue.add("a")
        controller.queue.add("b")
        await settle()
        assert reconciler.calls == []
    # running() shut the queue down and saw run() return, without reconciling the queued keys
    assert reconciler.calls == [] and len(controller.queue) == 2


async def test_a_controller_created_paused_starts_nothing_until_resumed() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    controller = make_controller(reconciler, clock, paused=True)
    controller.queue.add("a")  # queued before the workers run, as the start-up resync does
    async with running(controller):
        assert controller.paused and reconciler.calls == []
        controller.resume()
        await settle()
        assert reconciler.calls == ["a"]


async def test_a_pause_while_a_worker_is_handed_a_key_starts_nothing() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    controller = make_controller(reconciler, clock, workers=2)
    async with running(controller):  # both workers wait in get()
        controller.queue.add("a")  # wakes one worker with the key; it has not run yet
        controller.pause()
        await settle()
        assert reconciler.calls == [] and len(controller.queue) == 1 and controller.stats().in_flight == ()
        controller.resume()
        await settle()
        assert reconciler.calls == ["a"]


async def test_shutdown_drains_the_queue_then_returns_once_run_has() -> None:
    clock = FakeClock()
    gate = anyio.Event()
    reconciler = ScriptedReconciler(clock=clock)

    async def blocked() -> Result:
        await gate.wait()
        return Result()

    reconciler.script["a"] = [blocked]
    controller = make_controller(reconciler, clock)
    returned = anyio.Event()

    async def shutdown() -> None:
        await controller.shutdown()
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("a")
        controller.queue.add("b")
        await settle()
        tg.start_soon(shutdown)
        await settle()
        assert not returned.is_set()
        gate.set()
        await until(returned.is_set)
    assert reconciler.calls == ["a", "b"] and controller.stats().reconciles == 2


async def test_shutdown_of_a_paused_controller_lets_the_reconcile_in_flight_finish_and_starts_nothing() -> None:
    clock = FakeClock()
    gate = anyio.Event()
    reconciler = ScriptedReconciler(clock=clock)

    async def blocked() -> Result:
        await gate.wait()
        return Result()

    reconciler.script["a"] = [blocked]
    controller = make_controller(reconciler, clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("a")
        controller.queue.add("b")
        await settle()
        controller.pause()
        tg.start_soon(controller.shutdown)
        await settle()
        assert controller.stats().in_flight == ("a",)
        gate.set()
    assert reconciler.calls == ["a"] and controller.stats().reconciles == 1 and len(controller.queue) == 1


async def test_shutdown_with_cancel_cancels_the_reconcile_in_flight_without_an_outcome() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    cancelled = anyio.Event()

    async def endless() -> Result:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    reconciler.script["a"] = [endless]
    controller = make_controller(reconciler, clock, workers=2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("a")
        await settle()
        reconciler.script["b"] = [endless]
        controller.queue.add("b")  # the second worker takes it
        controller.queue.add("c")
        await settle()
        assert controller.stats().in_flight == ("a", "b")
        with capture_logs() as logs:
            await controller.shutdown(cancel=True)  # returns once run() has
    assert cancelled.is_set() and sorted(reconciler.calls) == ["a", "b"], "c was never started"
    stats = controller.stats()
    assert (stats.reconciles, stats.failures, stats.retries, stats.in_flight) == (0, 0, 0, ())
    assert [e["event"] for e in logs].count("reconcile cancelled: the controller is shutting down") == 2


async def test_shutdown_with_drain_waits_for_the_reconcile_in_flight() -> None:
    clock = FakeClock()
    gate = anyio.Event()
    reconciler = ScriptedReconciler(clock=clock)

    async def blocked() -> Result:
        await gate.wait()
        return Result()

    reconciler.script["a"] = [blocked]
    controller = make_controller(reconciler, clock)
    drained = anyio.Event()

    async def drain() -> None:
        await controller.queue.shutdown_with_drain()
        drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("a")
        controller.queue.add("b")
        await settle()
        tg.start_soon(drain)
        await settle()
        assert not drained.is_set()
        gate.set()
    assert drained.is_set()
    assert reconciler.calls == ["a", "b"]


async def test_wait_idle_returns_once_everything_is_reconciled() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(clock=clock)
    for i in range(0, 20, 4):
        reconciler.script[f"k{i}"] = [RuntimeError("retry me once")]
    controller = make_controller(reconciler, clock, workers=3)
    async with running(controller):
        for i in range(20):
            controller.queue.add(f"k{i}")
        idle = anyio.Event()

        async def wait() -> None:
            await controller.queue.wait_idle()
            idle.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await settle()
            assert not idle.is_set()  # five keys wait for their backoff
            clock.step(0.005)
        assert idle.is_set()
    assert sorted(reconciler.calls) == sorted([f"k{i}" for i in range(20)] + [f"k{i}" for i in range(0, 20, 4)])


async def test_running_twice_is_refused() -> None:
    controller = make_controller(ScriptedReconciler(), FakeClock())
    async with running(controller):
        with pytest.raises(RuntimeError, match="already running"):
            await controller.run()


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"timeout_s": 0}, {"max_retries": -1}])
async def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        make_controller(ScriptedReconciler(), FakeClock(), **kwargs)


@pytest.fixture
def debug_logging():
    """Let debug events through structlog's level filter for the test; restore the configuration after."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("debug_logging")
async def test_each_reconcile_logs_with_controller_key_and_reconcile_id_bound() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(name="examples", clock=clock)

    async def logs_inside() -> Result:
        structlog.get_logger("a.reconciler").info("working")
        return Result()

    reconciler.script["a"] = [logs_inside, ValueError("bad input"), logs_inside]
    controller = make_controller(reconciler, clock, max_retries=0)
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with running(controller):
            controller.queue.add("a")
            await settle()
            controller.queue.add("a")
            await settle()
            controller.queue.add("a")
            await settle()

    inside = [e for e in logs if e["event"] == "working"]
    done = [e for e in logs if e["event"] == "reconciled"]
    failed = [e for e in logs if e.get("key") == "a" and e["log_level"] == "error"]
    assert len(inside) == 2 and len(done) == 2 and len(failed) == 1
    for event in inside + done + failed:
        assert event["controller"] == "examples"
        assert event["key"] == "a"
        assert re.fullmatch(r"[0-9a-f]{12}", event["reconcile_id"])
    assert [e["reconcile_id"] for e in inside] == [e["reconcile_id"] for e in done]
    assert len({e["reconcile_id"] for e in done + failed}) == 3, "each reconcile gets its own id"
    assert all(e["log_level"] == "debug" and e["duration_s"] >= 0 for e in done)
    assert failed[0]["error"] == "ValueError: bad input"
    assert structlog.contextvars.get_contextvars() == {}


async def test_controller_metrics_are_scraped_with_controller_and_result_labels() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    clock = FakeClock()
    registry = CollectorRegistry()
    reconciler = ScriptedReconciler(name="examples", clock=clock)
    reconciler.script = {
        "ok": [Result()],
        "later": [Result(requeue_after=60)],
        "terminal": [TerminalError("no")],
        "dropped": [RuntimeError("x"), RuntimeError("y")],
    }
    controller = make_controller(reconciler, clock, registry, max_retries=1)
    async with running(controller):
        for key in reconciler.script:
            controller.queue.add(key)
        await settle()
        clock.step(1)
        await settle()

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }

    def total(result: str) -> float:
        return samples[("learnerd_reconcile_total", (("controller", "examples"), ("result", result)))]

    assert [total(r) for r in ("success", "requeue_after", "error", "timeout", "terminal")] == [1, 1, 2, 0, 1]
    assert samples[("learnerd_reconcile_dropped_total", (("controller", "examples"),))] == 1
    assert samples[("learnerd_reconcile_duration_seconds_count", (("controller", "examples"),))] == 5
    assert samples[("learnerd_controller_active_workers", (("controller", "examples"),))] == 0
