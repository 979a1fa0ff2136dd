"""Workqueue metrics with client-go's names, types and buckets, exported through prometheus-client.

A queue reports four events to its :class:`QueueMetrics`: a key became dirty (``add``), a worker
took it (``get``), a worker finished it (``done``), and an ``add_after`` call (``retry``). A
:class:`MetricsProvider` makes one :class:`QueueMetrics` per named queue; the default,
:class:`NoopMetricsProvider`, records nothing (client-go's default too), and a queue without a name
never records anything.

:class:`PrometheusMetricsProvider` registers these families, each labelled by the queue's ``name``,
on the :class:`~prometheus_client.CollectorRegistry` it is given (the metric set of Kubernetes'
component-base ``metrics/prometheus/workqueue`` provider):

* ``workqueue_depth`` (gauge): keys waiting to be handed out (dirty keys);
* ``workqueue_adds_total`` (counter): adds that made a key dirty (collapsed adds excluded);
* ``workqueue_queue_duration_seconds`` (histogram): seconds from a key's first add to its ``get``;
* ``workqueue_work_duration_seconds`` (histogram): seconds from ``get`` to ``done``;
* ``workqueue_unfinished_work_seconds`` (gauge): sum of the ages of the keys being processed now;
* ``workqueue_longest_running_processor_seconds`` (gauge): age of the oldest key being processed now;
* ``workqueue_retries_total`` (counter): ``add_after`` calls, so every rate-limited or delayed requeue.

Both histograms use component-base's buckets, ``ExponentialBuckets(10e-9, 10, 10)``: 1e-8 … 10 s.

Where client-go refreshes the two "unfinished" gauges from a goroutine every 500 ms, here a custom
collector computes them when the registry is scraped, from the start times of the keys in flight:
exact at scrape time, and no polling task to start or stop. The collector copies its inputs before
iterating, so a scrape from prometheus-client's own HTTP thread is safe.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from learnerd.runtime.workqueue.clock import Clock

#: component-base's ``ExponentialBuckets(10e-9, 10, 10)``, written out exactly.
LATENCY_BUCKETS: tuple[float, ...] = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


class QueueMetrics(Protocol):
    """What one queue reports. Called from the event-loop thread only."""

    def add(self, key: Hashable) -> None:
        """``key`` became dirty (a new add, not one collapsed into an existing entry)."""
        ...

    def get(self, key: Hashable) -> None:
        """A worker took ``key`` off the queue."""
        ...

    def done(self, key: Hashable) -> None:
        """A worker finished ``key``."""
        ...

    def retry(self) -> None:
        """``add_after`` was called on a queue that is not shutting down."""
        ...


class MetricsProvider(Protocol):
    """Makes the :class:`QueueMetrics` of each named queue."""

    def queue_metrics(self, name: str, clock: Clock) -> QueueMetrics:
        """Metrics for the queue called ``name``, timed with ``clock`` (the queue's own)."""
        ...


class _NoopQueueMetrics:
    def add(self, key: Hashable) -> None:
        pass

    def get(self, key: Hashable) -> None:
        pass

    def done(self, key: Hashable) -> None:
        pass

    def retry(self) -> None:
        pass


NOOP_QUEUE_METRICS: QueueMetrics = _NoopQueueMetrics()


class NoopMetricsProvider:
    """Records nothing: the default of every queue."""

    def queue_metrics(self, name: str, clock: Clock) -> QueueMetrics:
        return NOOP_QUEUE_METRICS


class _PrometheusQueueMetrics:
    """One queue's children of the provider's families, plus the timestamps the durations need."""

    def __init__(self, provider: PrometheusMetricsProvider, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self._depth = provider.depth.labels(name)
        self._adds = provider.adds.labels(name)
        self._queue_duration = provider.queue_duration.labels(name)
        self._work_duration = provider.work_duration.labels(name)
        self._retries = provider.retries.labels(name)
        self._added_at: dict[Hashable, float] = {}
        self.started_at: dict[Hashable, float] = {}

    def add(self, key: Hashable) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(key, self.clock.now())

    def get(self, key: Hashable) -> None:
        now = self.clock.now()
        self._depth.dec()
        self.started_at[key] = now
        added = self._added_at.pop(key, None)
        if added is not None:
            self._queue_duration.observe(now - added)

    def done(self, key: Hashable) -> None:
        started = self.started_at.pop(key, None)
        if started is not None:
            self._work_duration.observe(self.clock.now() - started)

    def retry(self) -> None:
        self._retries.inc()


class _InFlightCollector(Collector):
    """Computes ``workqueue_unfinished_work_seconds`` and ``..._longest_running_processor_seconds`` per scrape."""

    def __init__(self) -> None:
        self.queues: list[_PrometheusQueueMetrics] = []

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration; a steady rise means stuck workers.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest-running key of the workqueue has been in processing.",
            labels=["name"],
        )
        return unfinished, longest

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        unfinished, longest = self._families()
        for queue in tuple(self.queues):
            now = queue.clock.now()
            ages = [now - started for started in tuple(queue.started_at.values())]
            unfinished.add_metric([queue.name], sum(ages))
            longest.add_metric([queue.name], max(ages, default=0.0))
        yield unfinished
        yield longest


class PrometheusMetricsProvider:
    """Client-go's workqueue metrics on ``registry`` (see the module docstring for the families).

    Create one per registry: the families are registered in the constructor, so a second provider
    on the same registry raises ``ValueError`` (prometheus-client's duplicate-timeseries error).

    Args:
        registry: where the families are registered; the daemon owns one, tests make their own.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge("workqueue_depth", "Current depth of the workqueue.", ["name"], registry=registry)
        self.adds = Counter("workqueue_adds", "Adds handled by the workqueue.", ["name"], registry=registry)
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "Seconds a key waits in the workqueue before a worker takes it.",
            ["name"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "Seconds a worker takes to process a key from the workqueue.",
            ["name"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.retries = Counter("workqueue_retries", "Retries handled by the workqueue.", ["name"], registry=registry)
        self._in_flight = _InFlightCollector()
        registry.register(self._in_flight)

    def queue_metrics(self, name: str, clock: Clock) -> QueueMetrics:
        """Metrics of the queue ``name``.

        Raises:
            ValueError: a queue called ``name`` already reports to this provider.
        """
        if any(q.name == name for q in self._in_flight.queues):
            raise ValueError(f"a workqueue named {name!r} already reports to this metrics provider")
        metrics = _PrometheusQueueMetrics(self, name, clock)
        self._in_flight.queues.append(metrics)
        return metrics
