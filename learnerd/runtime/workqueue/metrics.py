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
exact at scrape time, and no polling task to start or stop.

The hot path records into plain numbers owned by each queue (a counter is an ``int``, a histogram a
list of bucket counts found with :func:`bisect.bisect_left`, as prometheus-client's ``le`` bounds are
inclusive); one custom collector (prometheus-client's ``Collector`` API) turns them into the families
when the registry is scraped. Recording on the event loop then costs no lock and no allocation per
operation — prometheus-client's own ``Counter`` / ``Histogram`` children take a lock per call, which
halved the daemon's queue throughput (``benchmarks/bench_workqueue.py``). The collector copies its
inputs before iterating, so a scrape from prometheus-client's own HTTP thread is safe.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

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


class _Histogram:
    """Bucket counts of one queue's durations: ``counts[i]`` observations in ``(bounds[i-1], bounds[i]]``,
    the last one above every bound (``+Inf``); ``total`` is their sum in seconds."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def samples(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` buckets as the exposition format wants them, and the sum."""
        counts, total = list(self.counts), self.total
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
            running += count
            buckets.append((floatToGoString(bound), running))
        return buckets, total


class _PrometheusQueueMetrics:
    """One queue's numbers (see the module docstring), plus the timestamps the durations need."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.depth = 0
        self.adds = 0
        self.retries = 0
        self.queue_duration = _Histogram()
        self.work_duration = _Histogram()
        self._added_at: dict[Hashable, float] = {}
        self.started_at: dict[Hashable, float] = {}

    def add(self, key: Hashable) -> None:
        self.adds += 1
        self.depth += 1
        self._added_at.setdefault(key, self.clock.now())

    def get(self, key: Hashable) -> None:
        now = self.clock.now()
        self.depth -= 1
        self.started_at[key] = now
        added = self._added_at.pop(key, None)
        if added is not None:
            self.queue_duration.observe(now - added)

    def done(self, key: Hashable) -> None:
        started = self.started_at.pop(key, None)
        if started is not None:
            self.work_duration.observe(self.clock.now() - started)

    def retry(self) -> None:
        self.retries += 1


class _WorkqueueCollector(Collector):
    """Every workqueue family, from the queues' numbers, at scrape time."""

    def __init__(self) -> None:
        self.queues: list[_PrometheusQueueMetrics] = []

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily,
        CounterMetricFamily,
        HistogramMetricFamily,
        HistogramMetricFamily,
        CounterMetricFamily,
        GaugeMetricFamily,
        GaugeMetricFamily,
    ]:
        return (
            GaugeMetricFamily("workqueue_depth", "Current depth of the workqueue.", labels=["name"]),
            CounterMetricFamily("workqueue_adds", "Adds handled by the workqueue.", labels=["name"]),
            HistogramMetricFamily(
                "workqueue_queue_duration_seconds",
                "Seconds a key waits in the workqueue before a worker takes it.",
                labels=["name"],
            ),
            HistogramMetricFamily(
                "workqueue_work_duration_seconds",
                "Seconds a worker takes to process a key from the workqueue.",
                labels=["name"],
            ),
            CounterMetricFamily("workqueue_retries", "Retries handled by the workqueue.", labels=["name"]),
            GaugeMetricFamily(
                "workqueue_unfinished_work_seconds",
                "Seconds of work in progress not yet observed by work_duration; a steady rise means stuck workers.",
                labels=["name"],
            ),
            GaugeMetricFamily(
                "workqueue_longest_running_processor_seconds",
                "Seconds the longest-running key of the workqueue has been in processing.",
                labels=["name"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        depth, adds, queue_duration, work_duration, retries, unfinished, longest = self._families()
        for queue in tuple(self.queues):
            labels = [queue.name]
            depth.add_metric(labels, queue.depth)
            adds.add_metric(labels, queue.adds)
            retries.add_metric(labels, queue.retries)
            for family, histogram in ((queue_duration, queue.queue_duration), (work_duration, queue.work_duration)):
                buckets, total = histogram.samples()
                family.add_metric(labels, buckets, total)
            now = queue.clock.now()
            ages = [now - started for started in tuple(queue.started_at.values())]
            unfinished.add_metric(labels, sum(ages))
            longest.add_metric(labels, max(ages, default=0.0))
        yield from (depth, adds, queue_duration, work_duration, retries, unfinished, longest)


class PrometheusMetricsProvider:
    """Client-go's workqueue metrics on ``registry`` (see the module docstring for the families).

    Create one per registry: the collector is registered in the constructor, so a second provider
    on the same registry raises ``ValueError`` (prometheus-client's duplicate-timeseries error).

    Args:
        registry: where the families are registered; the daemon owns one, tests make their own.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._collector = _WorkqueueCollector()
        registry.register(self._collector)

    def queue_metrics(self, name: str, clock: Clock) -> QueueMetrics:
        """Metrics of the queue ``name``.

        Raises:
            ValueError: a queue called ``name`` already reports to this provider.
        """
        if any(q.name == name for q in self._collector.queues):
            raise ValueError(f"a workqueue named {name!r} already reports to this metrics provider")
        metrics = _PrometheusQueueMetrics(name, clock)
        self._collector.queues.append(metrics)
        return metrics
