"""The controller: N workers running one reconciler over a rate-limiting workqueue.

This is the one place that turns reconcile outcomes into queue operations (the contract of
:mod:`learnerd.runtime.reconcile`, after controller-runtime and client-go's sample-controller). For each key
a worker takes from the queue:

* ``Result()``                    → ``forget(key)``;
* ``Result(requeue_after=s)``     → ``forget(key)``, then ``add_after(key, s)``;
* ``TerminalError``               → logged (error) and counted, ``forget(key)``, never retried;
* any other exception, a return value that is not a :class:`~learnerd.runtime.reconcile.Result`, or the
  per-reconcile timeout → ``add_rate_limited(key)`` while ``num_requeues(key) < max_retries``
  (logged as a warning), then ``forget(key)`` and the key is dropped (logged as an error, counted);
* cancelled by :meth:`Controller.shutdown` with ``cancel=True`` → no outcome at all (logged, not counted);
* in every case ``done(key)`` — so a key is never reconciled by two workers at once, and adds
  that arrive while it is reconciled collapse into exactly one more run.

No exception raised by a reconciler ends a worker. Cancellation (the daemon's task group being
cancelled) does end it, and the key in hand is marked done without any outcome.

A paused controller starts nothing: no key is handed to a reconciler from :meth:`Controller.pause` until
:meth:`Controller.resume`, not even while its queue drains at shutdown (its queued keys are then left
unreconciled: a level-triggered start-up resync lists them again). A key a worker was being handed at the
moment of the pause goes back on the queue.

A :class:`~learnerd.runtime.reconcile.BatchReconciler` gets up to ``batch_size`` keys per call: the worker
waits for one key, takes as many more as are ready right now, calls ``reconcile_batch`` and applies
each key's own outcome as above. An exception raised by the call (or its timeout) fails every key.

Each reconcile call runs with ``controller``, ``reconcile_id`` (12 hex digits, new per call) and
``key`` (for a batch: ``batch``, its size) bound in structlog's contextvars, so the reconciler's
own log events carry them; the controller logs one event per key and call: ``reconciled`` at debug
level with ``duration_s``, or a warning/error on failure.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import structlog

from learnerd.runtime.controller_metrics import ControllerMetrics
from learnerd.runtime.reconcile import BatchReconciler, Reconciler, Result, TerminalError
from learnerd.runtime.workqueue import RateLimitingQueue

log = structlog.get_logger(__name__)

#: Longest error message kept in :class:`LastError` and logs.
MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class LastError:
    """The most recent failure of a controller's reconciles."""

    key: str
    message: str  #: ``"ExceptionType: text"``, at most :data:`MAX_ERROR_CHARS` characters
    at: float  #: wall-clock time, Unix seconds


@dataclass(frozen=True)
class ControllerStats:
    """A snapshot of one controller, for ``learnerd ctl status``. Counts are since the controller was made."""

    name: str
    workers: int
    paused: bool
    queue_depth: int  #: keys queued, not yet taken by a worker
    waiting: int  #: keys waiting for a delay (``requeue_after`` or a failure backoff)
    in_flight: tuple[str, ...]  #: keys being reconciled now, sorted
    reconciles: int  #: per-key outcomes of every kind
    failures: int  #: exceptions and timeouts (each leads to a retry or a drop)
    terminal: int  #: ``TerminalError`` outcomes
    dropped: int  #: keys given up after ``max_retries`` retries
    retries: int  #: rate-limited requeues
    last_error: LastError | None


class _ReconcileTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"reconcile timed out after {seconds:g} s")


_Outcome = Result | BaseException


class Controller:
    """Runs ``workers`` concurrent workers that reconcile the keys of ``queue`` (see the module docstring).

    Args:
        reconciler: a :class:`~learnerd.runtime.reconcile.Reconciler`, or a
            :class:`~learnerd.runtime.reconcile.BatchReconciler` (then called with up to its ``batch_size`` keys).
        queue: this controller's own queue; nothing else may take keys from it. Durations are measured
            on its clock.
        workers: concurrent workers, >= 1.
        timeout_s: limit for one ``reconcile`` / ``reconcile_batch`` call, in wall-clock seconds
            (anyio's clock, not the queue's: it guards against hung I/O); > 0.
        max_retries: rate-limited requeues of a failing key before it is dropped, >= 0.
        metrics: where to count (see :mod:`learnerd.runtime.controller_metrics`); unregistered
            metrics by default.
        paused: create it paused (:meth:`pause`): it starts nothing, not even the first keys queued,
            until :meth:`resume`.

    Raises:
        ValueError: a setting is out of range, or the batch reconciler's ``batch_size`` is < 1.
    """

    def __init__(
        self,
        reconciler: Reconciler,
        queue: RateLimitingQueue[str],
        *,
        workers: int = 1,
        timeout_s: float = 60.0,
        max_retries: int = 15,
        metrics: ControllerMetrics | None = None,
        paused: bool = False,
    ) -> None:
        if workers < 1 or timeout_s <= 0 or max_retries < 0:
            raise ValueError(
                f"need workers >= 1, timeout_s > 0, max_retries >= 0; not {workers}, {timeout_s}, {max_retries}"
            )
        self._reconciler = reconciler
        self._batch_size = 1
        self._batch = reconciler if isinstance(reconciler, BatchReconciler) else None
        self._batched = self._batch is not None
        if self._batch is not None:
            self._batch_size = self._batch.batch_size
            if self._batch_size < 1:
                raise ValueError(f"{reconciler.name}: batch_size must be >= 1, not {self._batch_size}")
        self._queue = queue
        self._workers = workers
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._metrics = (metrics if metrics is not None else ControllerMetrics()).for_controller(reconciler.name)
        self._running = False
        self._stopped: anyio.Event | None = None  # set when run() returns; made by run(), in the event loop
        self._paused = paused
        self._cancelling = False  # shutdown(cancel=True) was called
        self._get_scopes: set[anyio.CancelScope] = set()  # workers waiting for a key
        self._pause_scopes: set[anyio.CancelScope] = set()  # workers waiting for resume()
        self._call_scopes: set[anyio.CancelScope] = set()  # reconcile calls in flight
        self._reconciles = 0
        self._failures = 0
        self._terminal = 0
        self._dropped = 0
        self._retries = 0
        self._last_error: LastError | None = None

    @property
    def name(self) -> str:
        """The reconciler's name: the ``controller`` of logs and metrics."""
        return self._reconciler.name

    @property
    def workers(self) -> int:
        """How many workers reconcile at once (``[controllers.NAME] workers``)."""
        return self._workers

    @property
    def queue(self) -> RateLimitingQueue[str]:
        return self._queue

    async def run(self) -> None:
        """Run the workers and the queue's timer task (do not start ``queue.run`` yourself).

        Returns once the queue has been shut down and every worker has finished what it still had to do
        (see :meth:`shutdown`, which also waits for this). Cancel the enclosing task group to stop at once
        (keys in flight are then marked done with no outcome).

        Raises:
            RuntimeError: this controller (or its queue's timer) is already running.
        """
        if self._running:
            raise RuntimeError(f"controller {self.name!r} is already running")
        self._running = True
        self._stopped = anyio.Event()
        log.info("controller started", controller=self.name, workers=self._workers, batch_size=self._batch_size)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._queue.run, name=f"{self.name}-timer")
                for i in range(self._workers):
                    tg.start_soon(self._worker, name=f"{self.name}-worker-{i}")
        finally:
            self._running = False
            self._stopped.set()
        log.info("controller stopped", controller=self.name)

    async def shutdown(self, *, cancel: bool = False) -> None:
        """Shut the queue down (later adds are ignored) and return once :meth:`run` has returned (at once
        when it is not running).

        By default the workers drain first: every key still queued, and every key added again while it
        was in flight, is reconciled — unless the controller is paused, which starts nothing: its
        reconciles in flight finish and its queued keys are left. With ``cancel``, the reconciles in
        flight are cancelled (their keys marked done with no outcome) and the queued keys are left: for
        work that may run for minutes, whose reconciler writes nothing when cancelled and lists the key
        again at the next start's resync.
        """
        if cancel:
            self._cancelling = True
            for scope in self._call_scopes:
                scope.cancel()
        self._queue.shutdown()
        if self._running and self._stopped is not None:
            await self._stopped.wait()

    def configure(self, *, timeout_s: float, max_retries: int) -> None:
        """Change the per-reconcile timeout and the retry limit (a config reload); the next reconcile
        uses them. The number of workers is fixed at construction.

        Raises:
            ValueError: ``timeout_s <= 0`` or ``max_retries < 0``.
        """
        if timeout_s <= 0 or max_retries < 0:
            raise ValueError(f"need timeout_s > 0, max_retries >= 0; not {timeout_s}, {max_retries}")
        self._timeout_s = timeout_s
        self._max_retries = max_retries

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @property
    def max_retries(self) -> int:
        return self._max_retries

    def pause(self) -> None:
        """Stop handing keys to workers. Adds still queue up; reconciles in flight finish.

        A paused controller starts nothing, not even when its queue shuts down: its workers then end
        and leave the queued keys, so that :meth:`run` (and :meth:`shutdown`) can return.
        """
        self._paused = True
        for scope in self._get_scopes:
            scope.cancel()

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        self._paused = False
        for scope in self._pause_scopes:
            scope.cancel()

    @property
    def paused(self) -> bool:
        return self._paused

    def stats(self) -> ControllerStats:
        """A snapshot of this controller and its queue."""
        return ControllerStats(
            name=self.name,
            workers=self._workers,
            paused=self._paused,
            queue_depth=len(self._queue),
            waiting=self._queue.num_waiting,
            in_flight=tuple(sorted(self._queue.processing_keys())),
            reconciles=self._reconciles,
            failures=self._failures,
            terminal=self._terminal,
            dropped=self._dropped,
            retries=self._retries,
            last_error=self._last_error,
        )

    async def _worker(self) -> None:
        queue = self._queue
        while not self._cancelling:
            if self._paused:
                if queue.shutting_down:
                    return  # a paused controller starts nothing, not even to drain its queue
                with anyio.CancelScope() as scope:  # resume() cancels it; a shutdown ends the wait
                    self._pause_scopes.add(scope)
                    try:
                        await queue.wait_shutdown()
                    finally:
                        self._pause_scopes.discard(scope)
                continue
            key: str | None = None
            with anyio.CancelScope() as scope:  # pause() cancels it; a cancelled get takes no key
                self._get_scopes.add(scope)
                try:
                    key, _ = await queue.get()
                finally:
                    self._get_scopes.discard(scope)
            if scope.cancelled_caught:
                continue
            if key is None:  # shut down and empty
                return
            keys = [key]
            while len(keys) < self._batch_size and (more := queue.get_nowait()) is not None:
                keys.append(more)
            if self._paused or self._cancelling:
                # Paused (or cancelled) while this worker was being woken with a key: nothing starts. The key
                # goes back on the queue (added while it is processing, so done() queues it again); a queue
                # that is shutting down ignores the add, and the key is left for the next start's resync.
                for k in keys:
                    queue.add(k)
                    queue.done(k)
                continue
            try:
                await self._reconcile(keys)
            finally:
                for k in keys:
                    queue.done(k)
            # Let producers and other workers run even when reconciles never block.
            await anyio.lowlevel.checkpoint()

    async def _reconcile(self, keys: list[str]) -> None:
        scope_vars: dict[str, object] = {"key": keys[0]} if not self._batched else {"batch": len(keys)}
        with structlog.contextvars.bound_contextvars(
            controller=self.name, reconcile_id=secrets.token_hex(6), **scope_vars
        ):
            self._metrics.active_workers.inc()
            started = self._queue.clock.now()
            try:
                outcomes = await self._call(keys)
            finally:
                self._metrics.active_workers.dec()
            duration = self._queue.clock.now() - started
            if outcomes is None:
                log.info("reconcile cancelled: the controller is shutting down", keys=len(keys), duration_s=duration)
                return
            self._metrics.observe_duration(duration)
            for key in keys:
                with structlog.contextvars.bound_contextvars(key=key):
                    self._apply(key, outcomes[key], duration)

    async def _call(self, keys: list[str]) -> dict[str, _Outcome] | None:
        """Each key's outcome; None when :meth:`shutdown` cancelled the call."""
        outcomes: dict[str, _Outcome] = {}
        with anyio.move_on_after(self._timeout_s) as scope:
            self._call_scopes.add(scope)
            try:
                if self._batch is not None:
                    returned = await self._batch.reconcile_batch(list(keys))
                    outcomes = _batch_outcomes(keys, returned)
                else:
                    outcomes = {keys[0]: _checked(await self._reconciler.reconcile(keys[0]), "reconcile")}
            except Exception as exc:
                outcomes = dict.fromkeys(keys, exc)
            finally:
                self._call_scopes.discard(scope)
        if scope.cancelled_caught:
            if self._cancelling:
                return None
            outcomes = dict.fromkeys(keys, _ReconcileTimeout(self._timeout_s))
        return outcomes

    def _apply(self, key: str, outcome: _Outcome, duration: float) -> None:
        queue = self._queue
        self._reconciles += 1
        if isinstance(outcome, Result):
            queue.forget(key)
            if outcome.requeue_after is None:
                self._metrics.reconciled("success")
                log.debug("reconciled", duration_s=duration)
            else:
                queue.add_after(key, outcome.requeue_after)
                self._metrics.reconciled("requeue_after")
                log.debug("reconciled", duration_s=duration, requeue_after_s=outcome.requeue_after)
            return

        message = _describe(outcome)
        self._last_error = LastError(key=key, message=message, at=time.time())
        if isinstance(outcome, TerminalError):
            queue.forget(key)
            self._terminal += 1
            self._metrics.reconciled("terminal")
            log.error("reconcile failed terminally; not retrying", error=message, duration_s=duration)
            return

        self._failures += 1
        exc_info = outcome if outcome.__traceback__ is not None else None  # no traceback for a timeout
        self._metrics.reconciled("timeout" if isinstance(outcome, _ReconcileTimeout) else "error")
        requeues = queue.num_requeues(key)
        if requeues < self._max_retries:
            delay = queue.add_rate_limited(key)
            self._retries += 1
            log.warning(
                "reconcile failed; requeued with backoff",
                error=message,
                retry=requeues + 1,
                max_retries=self._max_retries,
                delay_s=delay,
                duration_s=duration,
                exc_info=exc_info,
            )
        else:
            queue.forget(key)
            self._dropped += 1
            self._metrics.dropped()
            log.error(
                "reconcile failed; retries exhausted, dropping key",
                error=message,
                retries=requeues,
                duration_s=duration,
                exc_info=exc_info,
            )


def _checked(value: object, call: str) -> _Outcome:
    """``value`` if it is a Result, else a TypeError describing it (a reconciler bug, retried like any failure)."""
    if isinstance(value, Result):
        return value
    return TypeError(f"{call} returned {value!r}, not a learnerd.runtime.reconcile.Result")


def _batch_outcomes(keys: Sequence[str], returned: object) -> dict[str, _Outcome]:
    if not isinstance(returned, Mapping):
        error = TypeError(f"reconcile_batch returned {type(returned).__name__}, not a mapping of key to outcome")
        return dict.fromkeys(keys, error)
    outcomes: dict[str, _Outcome] = {}
    for key in keys:
        if key not in returned:
            outcomes[key] = RuntimeError("reconcile_batch returned no outcome for this key")
        elif isinstance(returned[key], BaseException):
            outcomes[key] = returned[key]
        else:
            outcomes[key] = _checked(returned[key], "reconcile_batch")
    return outcomes


def _describe(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, _ReconcileTimeout) else f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
