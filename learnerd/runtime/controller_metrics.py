"""Prometheus metrics of the controllers, labelled by controller name (after controller-runtime's).

* ``learnerd_reconcile_total{controller, result}`` (counter): one per key and reconcile, ``result``
  one of :data:`RESULTS`;
* ``learnerd_reconcile_duration_seconds{controller}`` (histogram): seconds per ``reconcile`` call
  (a ``reconcile_batch`` call is one observation, whatever its size);
* ``learnerd_reconcile_dropped_total{controller}`` (counter): keys given up after ``max_retries``
  failed requeues;
* ``learnerd_controller_active_workers{controller}`` (gauge): workers reconciling right now.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: The values of the ``result`` label: returned ``Result()``, returned ``Result(requeue_after=…)``,
#: raised an exception, ran past the timeout, raised ``TerminalError``.
RESULTS: tuple[str, ...] = ("success", "requeue_after", "error", "timeout", "terminal")

#: From 5 ms (a store lookup) to 5 min (a large embedding batch on a CPU).
DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ControllerMetricsChildren:
    """The series of one controller; made by :meth:`ControllerMetrics.for_controller`."""

    def __init__(self, metrics: ControllerMetrics, controller: str) -> None:
        self._results = {result: metrics.reconciles.labels(controller, result) for result in RESULTS}
        self._duration = metrics.duration.labels(controller)
        self._dropped = metrics.dropped.labels(controller)
        self.active_workers = metrics.active_workers.labels(controller)

    def reconciled(self, result: str) -> None:
        """Count one key's reconcile with ``result`` (one of :data:`RESULTS`)."""
        self._results[result].inc()

    def observe_duration(self, seconds: float) -> None:
        self._duration.observe(seconds)

    def dropped(self) -> None:
        self._dropped.inc()


class ControllerMetrics:
    """The controllers' metric families.

    Args:
        registry: where to register them (the daemon's one registry; tests make their own). None
            keeps them unregistered: they count, but no scrape sees them.

    Raises:
        ValueError: these families are already registered on ``registry``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.reconciles = Counter(
            "learnerd_reconcile", "Reconciles per key, by result.", ["controller", "result"], registry=registry
        )
        self.duration = Histogram(
            "learnerd_reconcile_duration_seconds",
            "Seconds per reconcile call (a batch is one call).",
            ["controller"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.dropped = Counter(
            "learnerd_reconcile_dropped",
            "Keys given up after max_retries failed requeues.",
            ["controller"],
            registry=registry,
        )
        self.active_workers = Gauge(
            "learnerd_controller_active_workers", "Workers reconciling right now.", ["controller"], registry=registry
        )

    def for_controller(self, controller: str) -> ControllerMetricsChildren:
        """The series of ``controller``, each created at zero so that it is exported before its first event."""
        return ControllerMetricsChildren(self, controller)
