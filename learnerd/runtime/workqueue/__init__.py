"""learnerd's workqueue: client-go's ``util/workqueue`` semantics on anyio.

The contract
------------

A workqueue holds *keys* (hashable values; learnerd uses strings such as block ids) that need
processing, and hands them to workers:

* **Fair**: keys are handed out in the order they were added (FIFO).
* **Stingy**: a key waiting in the queue is there once, however many times it is added. A key is
  never handed to two workers at once: from :meth:`~WorkQueue.get` until :meth:`~WorkQueue.done`
  it is *processing*, and any number of adds meanwhile collapse into exactly one more run,
  queued when ``done`` is called. Internally: the FIFO, a *dirty* set (keys that need processing)
  and a *processing* set.
* **Shutdown**: after :meth:`~WorkQueue.shutdown` new adds are ignored, keys already queued are
  still handed out, and then ``get`` returns ``(None, True)`` so workers stop.
  :meth:`~WorkQueue.shutdown_with_drain` also waits until every key queued or in flight (a key
  re-added while in flight included) has been processed; a later ``shutdown`` ends that wait.
  Keys waiting for a delay are dropped at shutdown.
* **Delays** (:class:`DelayingQueue`): ``add_after(key, seconds)`` adds the key later. One timer
  task (:meth:`DelayingQueue.run`) and a heap serve every delay; when a key is already waiting,
  the earlier ready time wins and a later one changes nothing; ``seconds <= 0`` adds at once.
* **Rate limiting** (:class:`RateLimitingQueue`): ``add_rate_limited(key)`` is
  ``add_after(key, limiter.when(key))``; ``forget(key)`` resets the limiter's record of the key
  (call it after success, or when giving up); ``num_requeues(key)`` counts the requeues since.
  The default limiter, :func:`default_controller_rate_limiter`, is client-go's
  ``DefaultControllerRateLimiter``: the max of a per-key exponential backoff (5 ms doubling to
  1000 s) and one token bucket for all keys (10 qps, burst 100); its settings can change while
  it runs (:meth:`ControllerRateLimiter.reconfigure`, a config reload).
* **Time** comes from an injected :class:`Clock` (:class:`RealClock` by default), so tests run on
  a :class:`FakeClock`. Durations are float seconds everywhere.
* **Metrics**: client-go's names (``workqueue_depth``, ``workqueue_adds_total``, …) with a ``name``
  label, through a :class:`MetricsProvider`; :class:`PrometheusMetricsProvider` puts them on a
  prometheus-client registry, :class:`NoopMetricsProvider` (the default) records nothing.
* **Idle**: :attr:`WorkQueue.idle` is true when no key is queued, processing, or waiting for a
  delay; :meth:`WorkQueue.wait_idle` waits for that (``learnerd run --once`` drains this way).

Threads
-------

A queue belongs to one event loop. Every method, sync or async, must be called from that loop's
thread; nothing is locked. A worker thread (``anyio.to_thread.run_sync``) that needs to add a key
goes through the loop: ``anyio.from_thread.run_sync(queue.add, key)``.

Differences from client-go
--------------------------

``get`` is a coroutine and cancellation-safe (a cancelled ``get`` takes no key); ``get_nowait``
hands out a ready key without waiting (the controller builds batches with it); ``done`` on a key
that is not processing raises ``ValueError`` instead of corrupting the queue; ``add_rate_limited``
returns the delay it chose. With one thread there is no channel between ``add_after`` and the
timer, hence no "heartbeat" wake-up. The two "unfinished work" gauges are computed at scrape time.

Typical use (what :class:`~learnerd.runtime.controller.Controller` does for you)::

    queue = RateLimitingQueue("examples", clock=clock, metrics=provider)
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.run)                 # the timer behind add_after / add_rate_limited
        key, shutdown = await queue.get()
        if not shutdown:
            try:
                ...                              # process key
                queue.forget(key)
            except Exception:
                queue.add_rate_limited(key)
            finally:
                queue.done(key)
        queue.shutdown()                         # run() returns, the task group exits
"""

from learnerd.runtime.workqueue.clock import Clock, FakeClock, RealClock
from learnerd.runtime.workqueue.delaying import DelayingQueue
from learnerd.runtime.workqueue.metrics import (
    LATENCY_BUCKETS,
    MetricsProvider,
    NoopMetricsProvider,
    PrometheusMetricsProvider,
    QueueMetrics,
)
from learnerd.runtime.workqueue.queue import WorkQueue
from learnerd.runtime.workqueue.rate_limiters import (
    BucketRateLimiter,
    ControllerRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    RateLimiterConfig,
    RateLimiterSettings,
    default_controller_rate_limiter,
)
from learnerd.runtime.workqueue.rate_limiting import RateLimitingQueue

__all__ = [
    "LATENCY_BUCKETS",
    "BucketRateLimiter",
    "Clock",
    "ControllerRateLimiter",
    "DelayingQueue",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PrometheusMetricsProvider",
    "QueueMetrics",
    "RateLimiter",
    "RateLimiterConfig",
    "RateLimiterSettings",
    "RateLimitingQueue",
    "RealClock",
    "WorkQueue",
    "default_controller_rate_limiter",
]
