"""A backfill run inside the running daemon: enqueue the blocks since T, then follow the pipeline
until it is idle (``POST /backfill`` starts one, ``GET /backfill`` shows it).

Progress is what the "examples" controller reconciled since the job began (capped at the number of
blocks); the job is done when every queue is idle at once — with steady intake that is when the
pipeline has caught up, and a paused controller keeps it running until resumed. ``changes`` counts
what the reconcilers changed since the job began (examples written or deleted, vectors embedded,
probe sections rewritten), intake that arrived meanwhile included.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Changes = dict[str, dict[str, int]]


def _delta(now: Changes, base: Changes) -> Changes:
    out: Changes = {}
    for controller, counts in now.items():
        diff = {k: v - base.get(controller, {}).get(k, 0) for k, v in counts.items()}
        if any(diff.values()):
            out[controller] = {k: v for k, v in diff.items() if v}
    return out


@dataclass
class BackfillJob:
    """One backfill; :meth:`to_json` is the API's shape.

    ``since`` and the ``*_at`` fields are epoch seconds; ``state`` is running, done or cancelled
    (the daemon stopped before the pipeline was idle).
    """

    id: int
    since: float
    blocks: int
    started_at: float
    state: str = "running"
    finished_at: float | None = None
    done: int = 0
    changes: Changes = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class BackfillTracker:
    """Follows one :class:`BackfillJob` at a time.

    Args:
        reconciled: the "examples" controller's reconcile count so far.
        changes: the reconcilers' change counters so far (``RunSummary.changes``).
        wait_idle: returns once every queue is idle.
    """

    def __init__(
        self,
        reconciled: Callable[[], int],
        changes: Callable[[], Changes],
        wait_idle: Callable[[], Awaitable[None]],
    ) -> None:
        self._reconciled = reconciled
        self._changes = changes
        self._wait_idle = wait_idle
        self._job: BackfillJob | None = None
        self._base_reconciled = 0
        self._base_changes: Changes = {}
        self._next_id = 1

    @property
    def running(self) -> bool:
        return self._job is not None and self._job.state == "running"

    def begin(self, since: float, enqueue: Callable[[], int]) -> BackfillJob:
        """Snapshot the counters, call ``enqueue()`` (returns how many blocks it queued), start a job."""
        self._base_reconciled = self._reconciled()
        self._base_changes = self._changes()
        blocks = enqueue()
        self._job = BackfillJob(id=self._next_id, since=since, blocks=blocks, started_at=time.time())
        self._next_id += 1
        log.info("backfill started", job=self._job.id, since=since, blocks=blocks)
        self._refresh(self._job)
        return self._job

    async def follow(self) -> None:
        """Wait until the pipeline is idle, then mark the job done (cancelled if cancelled first)."""
        job = self._job
        assert job is not None
        try:
            await self._wait_idle()
        except BaseException:
            self._refresh(job, "cancelled")
            raise
        self._refresh(job, "done")
        log.info("backfill done", job=job.id, blocks=job.blocks, changes=job.changes)

    def _refresh(self, job: BackfillJob, state: str | None = None) -> None:
        job.done = min(job.blocks, self._reconciled() - self._base_reconciled)
        job.changes = _delta(self._changes(), self._base_changes)
        if state is not None:
            job.state = state
            job.finished_at = time.time()
            if state == "done":
                job.done = job.blocks

    def current(self) -> BackfillJob | None:
        """The latest job with fresh progress, or None before the first."""
        if self._job is not None and self._job.state == "running":
            self._refresh(self._job)
        return self._job
