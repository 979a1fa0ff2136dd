"""The reconciler contract, after controller-runtime's ``Reconcile(ctx, req) (Result, error)``.

A reconciler is level-triggered and idempotent: ``reconcile(key)`` reads the *current* state of
``key`` from the store (never trusting whatever event caused the call), makes the world match it,
and returns a :class:`Result`. The controller (``learnerd.runtime.controller``) is the one place
that turns outcomes into queue operations:

* return ``Result()``                    → ``forget(key)`` (its failure backoff is reset);
* return ``Result(requeue_after=s)``     → ``forget(key)`` then ``add_after(key, s)``;
* raise :class:`TerminalError`           → logged and counted, never retried;
* raise any other exception, or time out → ``add_rate_limited(key)`` (per-key exponential backoff).

This module sits below both ``daemon/`` and ``reconcilers/`` so neither imports the other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for: ``requeue_after`` seconds until the next run, or None."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A failure that retrying cannot fix (bad input, a refused document): logged, counted, dropped."""


@runtime_checkable
class Reconciler(Protocol):
    """Reconciles one key at a time.

    ``name`` labels the controller's logs and metrics (and names its workqueue); ``changes`` counts what
    the reconciler changed in the world, by kind (a run's summary); :meth:`resync_keys` is the
    level-triggered initial list (an informer's list): every key whose state this reconciler may need
    to make current, put on the queue at start-up.
    """

    name: str

    @property
    def changes(self) -> Counter[str]: ...

    def resync_keys(self) -> Iterable[str]: ...

    async def reconcile(self, key: str) -> Result: ...


@runtime_checkable
class BatchReconciler(Reconciler, Protocol):
    """A reconciler that gains from batching (embeddings). The controller hands it up to
    ``batch_size`` ready keys at once; the returned mapping gives each key's own outcome — a
    :class:`Result` or the exception it failed with — so each key keeps the per-key guarantees.
    A key missing from the mapping counts as failed. An exception raised by the call itself fails
    every key of the batch.
    """

    batch_size: int

    async def reconcile_batch(self, keys: Sequence[str]) -> Mapping[str, Result | BaseException]: ...


@runtime_checkable
class ProgressReporter(Protocol):
    """A reconciler whose reconciles are long (training, evaluation) and say how far along they are: the
    admin status shows :meth:`progress` per key in flight and the metrics export it; a reconciler without
    it shows only its keys in flight."""

    def progress(self) -> Mapping[str, Mapping[str, Any]]:
        """Every key in flight → ``{"step", "total", "elapsed_s", "s_per_step", "eta_s"}`` (None where not
        known yet) and the reconciler's own JSON-able fields
        (:meth:`learnerd.runtime.progress.ProgressBoard.snapshot`)."""
        ...
