"""Workqueue metrics scraped from a real prometheus-client registry (client-go's metrics_test.go, TestMetrics)."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from learnerd.runtime.workqueue import (
    LATENCY_BUCKETS,
    FakeClock,
    NoopMetricsProvider,
    PrometheusMetricsProvider,
    RateLimitingQueue,
    WorkQueue,
)
from tests.unit.async_helpers import settle

pytestmark = pytest.mark.anyio


def scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the text exposition, keyed by (sample name, labels)."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, sample: str, /, **labels: str) -> float:
    return samples[(sample, frozenset(labels.items()))]


def family_types(registry: CollectorRegistry) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(generate_latest(registry).decode())}


async def test_metric_names_types_and_buckets_match_client_go() -> None:
    registry = CollectorRegistry()
    WorkQueue("q", clock=FakeClock(), metrics=PrometheusMetricsProvider(registry))
    types = family_types(registry)
    assert types["workqueue_depth"] == "gauge"
    assert types["workqueue_adds"] == "counter"  # exposed as workqueue_adds_total
    assert types["workqueue_queue_duration_seconds"] == "histogram"
    assert types["workqueue_work_duration_seconds"] == "histogram"
    assert types["workqueue_unfinished_work_seconds"] == "gauge"
    assert types["workqueue_longest_running_processor_seconds"] == "gauge"
    assert types["workqueue_retries"] == "counter"
    samples = scrape(registry)
    assert value(samples, "workqueue_adds_total", name="q") == 0
    assert value(samples, "workqueue_retries_total", name="q") == 0
    buckets = sorted(
        float(dict(labels)["le"]) for (n, labels) in samples if n == "workqueue_queue_duration_seconds_bucket"
    )
    assert buckets[:-1] == list(LATENCY_BUCKETS)
    assert list(LATENCY_BUCKETS) == pytest.approx(
        [10e-9 * 10**i for i in range(10)]
    )  # ExponentialBuckets(10e-9, 10, 10)
    assert buckets[-1] == float("inf")


async def test_metrics_follow_a_key_through_the_queue() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("test", clock=clock, metrics=PrometheusMetricsProvider(registry))

    q.add("foo")
    s = scrape(registry)
    assert value(s, "workqueue_adds_total", name="test") == 1
    assert value(s, "workqueue_depth", name="test") == 1

    clock.step(50e-6)
    key, _ = await q.get()
    s = scrape(registry)
    assert value(s, "workqueue_queue_duration_seconds_sum", name="test") == pytest.approx(50e-6)
    assert value(s, "workqueue_queue_duration_seconds_count", name="test") == 1
    assert value(s, "workqueue_queue_duration_seconds_bucket", name="test", le="1e-05") == 0
    assert value(s, "workqueue_queue_duration_seconds_bucket", name="test", le="0.0001") == 1

    for _ in range(5):  # re-added while processing: de-duplicated into one add
        q.add(key)
    s = scrape(registry)
    assert value(s, "workqueue_adds_total", name="test") == 2
    assert value(s, "workqueue_depth", name="test") == 1

    clock.step(25e-6)
    q.done(key)
    s = scrape(registry)
    assert value(s, "workqueue_work_duration_seconds_sum", name="test") == pytest.approx(25e-6)
    assert value(s, "workqueue_work_duration_seconds_count", name="test") == 1
    assert value(s, "workqueue_depth", name="test") == 1

    key, _ = await q.get()  # back on the queue; it waited 25 µs since its re-add
    s = scrape(registry)
    assert value(s, "workqueue_queue_duration_seconds_count", name="test") == 2
    assert value(s, "workqueue_queue_duration_seconds_sum", name="test") == pytest.approx(75e-6)
    assert value(s, "workqueue_depth", name="test") == 0

    clock.step(0.001)
    s = scrape(registry)  # computed at scrape time
    assert value(s, "workqueue_unfinished_work_seconds", name="test") == pytest.approx(0.001)
    assert value(s, "workqueue_longest_running_processor_seconds", name="test") == pytest.approx(0.001)

    q.done(key)
    s = scrape(registry)
    assert value(s, "workqueue_work_duration_seconds_count", name="test") == 2
    assert value(s, "workqueue_work_duration_seconds_sum", name="test") == pytest.approx(25e-6 + 0.001)
    assert value(s, "workqueue_unfinished_work_seconds", name="test") == 0
    assert value(s, "workqueue_longest_running_processor_seconds", name="test") == 0


async def test_unfinished_work_sums_and_longest_takes_the_oldest() -> None:
    registry = CollectorRegistry()
    clock = FakeClock(start=100.0)
    q: WorkQueue[str] = WorkQueue("busy", clock=clock, metrics=PrometheusMetricsProvider(registry))
    q.add("a")
    q.add("b")
    await q.get()
    clock.step(3)
    await q.get()
    clock.step(1)
    s = scrape(registry)
    assert value(s, "workqueue_unfinished_work_seconds", name="busy") == pytest.approx(4 + 1)
    assert value(s, "workqueue_longest_running_processor_seconds", name="busy") == pytest.approx(4)


async def test_retries_count_every_add_after() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue("rl", clock=clock, metrics=PrometheusMetricsProvider(registry))
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        q.add_rate_limited("a")
        q.add_rate_limited("a")
        q.add_after("b", 0)
        await settle()
        q.shutdown()
    q.add_after("ignored", 1)  # after shutdown: not counted
    s = scrape(registry)
    assert value(s, "workqueue_retries_total", name="rl") == 3
    assert value(s, "workqueue_adds_total", name="rl") == 1  # only b: a is still waiting


async def test_queues_sharing_a_registry_are_told_apart_by_name() -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)
    first: WorkQueue[str] = WorkQueue("examples", clock=FakeClock(), metrics=provider)
    second: WorkQueue[str] = WorkQueue("embeddings", clock=FakeClock(), metrics=provider)
    first.add("x")
    second.add("x")
    second.add("y")
    s = scrape(registry)
    assert value(s, "workqueue_depth", name="examples") == 1
    assert value(s, "workqueue_depth", name="embeddings") == 2
    assert value(s, "workqueue_unfinished_work_seconds", name="examples") == 0
    with pytest.raises(ValueError, match="already reports"):
        WorkQueue("examples", metrics=provider)


async def test_unnamed_queue_and_noop_provider_record_nothing() -> None:
    registry = CollectorRegistry()
    provider = PrometheusMetricsProvider(registry)
    unnamed: WorkQueue[str] = WorkQueue(metrics=provider)
    unnamed.add("a")
    noop: WorkQueue[str] = WorkQueue("noop", metrics=NoopMetricsProvider())
    noop.add("a")
    assert not [key for key in scrape(registry) if dict(key[1]).get("name") is not None]


async def test_second_provider_on_one_registry_is_refused() -> None:
    registry = CollectorRegistry()
    PrometheusMetricsProvider(registry)
    with pytest.raises(ValueError):
        PrometheusMetricsProvider(registry)
