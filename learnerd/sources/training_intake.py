"""What feeds the "training" workqueue while the daemon runs: the file watch, the debouncer, the RPC inbox.

::

    .dlm saved ─► DocumentWatcher ─touch─┐
                                          ├─► Debouncer (debounce_s of quiet, at most debounce_max_s) ─► "training"
    POST /rpc ─► ProbeInbox (journal) ─touch┘

* A change to a watched document (``[training]`` docs roots, plus the individually named documents
  learnerd writes) touches the debouncer with the document's path; a burst of saves is one cycle.
* An accepted ``inject_probe`` touches the RPC target document the same way: a push triggers a cycle on
  its own, and a burst of pushes is one cycle.
* :meth:`TrainingIntake.resync` is the level-triggered initial list: every watched document and every
  document with probes pending in the journal goes on the queue at once (start-up, ``run --once``).
* A removed document: the watcher logs it; its adapters are kept and it is not trained again until it
  reappears (the reconciler finds it missing).

While :meth:`TrainingIntake.run` runs it also keeps a :class:`~learnerd.training.runner.WarmSpare`
training process (``[training] warm_spare``) for the reconciler, so a cycle skips the process start-up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.runtime.debounce import Debouncer
from learnerd.runtime.workqueue import RateLimitingQueue
from learnerd.sources.cycle_eta import CycleEta
from learnerd.sources.filewatch import DocumentWatcher
from learnerd.sources.probe_inbox import ProbeInbox
from learnerd.store.probe_journal import ProbeJournal
from learnerd.training.runner import WarmSpare
from learnerd.training.settings import TrainingSettings

log = structlog.get_logger(__name__)


class TrainingTarget(Protocol):
    """What the intake needs of the training reconciler (``learnerd.reconcilers.training``)."""

    journal: ProbeJournal | None
    spare: WarmSpare | None

    def resync_keys(self) -> list[str]: ...

    @property
    def in_flight(self) -> Mapping[str, float]: ...

    @property
    def recent_cycles_s(self) -> Sequence[float]: ...


class TrainingIntake:
    """The training queue's producers (see the module docstring).

    Args:
        settings: the ``[training]`` section (debounce, rescan, warm spare).
        analyzer: the ``[analyzer]`` section (watchfiles' debounce and polling switch).
        target: the training reconciler.
        queue: the "training" workqueue.
        roots: directories watched recursively for documents.
        files: documents watched individually (learnerd's own targets, wherever they are).
        rpc_document: the document injected probes go to.
        inbox_capacity: with a number, :attr:`inbox` is a probe inbox of that capacity (``[rpc] capacity``)
            that the RPC server (:class:`learnerd.api.rpc.RpcServer`, started by the daemon) submits to;
            None: no RPC, no inbox.
        workers: the training controller's workers (for the ETA).

    Raises:
        ValueError: an inbox is asked for but the target has no journal.
    """

    def __init__(
        self,
        settings: TrainingSettings,
        analyzer: AnalyzerConfig,
        target: TrainingTarget,
        queue: RateLimitingQueue[str],
        *,
        roots: Sequence[Path],
        files: Sequence[Path],
        rpc_document: Path,
        inbox_capacity: int | None = None,
        workers: int = 1,
    ) -> None:
        self._target = target
        self._queue = queue
        self._warm_spare = settings.warm_spare
        self.debouncer: Debouncer[str] = Debouncer(
            queue.add, quiet_s=settings.debounce_s, max_wait_s=settings.debounce_max_s
        )
        self.watcher = DocumentWatcher(
            roots,
            [*files, rpc_document],
            on_change=lambda path: self.debouncer.touch(str(path)),
            rescan_interval_s=settings.rescan_interval_s,
            debounce_ms=analyzer.debounce_ms,
            force_polling=analyzer.force_polling,
        )
        self.eta = CycleEta(
            debounce_remaining=self.debouncer.remaining,
            queued=lambda: len(queue),
            in_flight=lambda: target.in_flight,
            recent_cycles_s=lambda: target.recent_cycles_s,
            workers=workers,
        )
        self.inbox: ProbeInbox | None = None
        if inbox_capacity is not None:
            if target.journal is None:
                raise ValueError("the RPC server needs a probe journal")
            self.inbox = ProbeInbox(target.journal, capacity=inbox_capacity, on_accepted=self.debouncer.touch)

    def resync(self) -> int:
        """Put every watched document and every document with pending probes on the queue; return how many."""
        keys = [str(p) for p in self.watcher.scan_now()]
        keys += self._target.resync_keys()
        for key in dict.fromkeys(keys):
            self._queue.add(key)
        return len(dict.fromkeys(keys))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch, debounce and commit the probe inbox until cancelled; reports started once the watcher
        is armed and the inbox runs."""
        async with contextlib.AsyncExitStack() as stack:
            if self._warm_spare:
                self._target.spare = await stack.enter_async_context(WarmSpare())
                stack.callback(setattr, self._target, "spare", None)
            tg = await stack.enter_async_context(anyio.create_task_group())
            self.watcher.scan_now()
            tg.start_soon(self.debouncer.run, name="training-debouncer")
            await tg.start(self.watcher.run, name="document-watcher")
            if self.inbox is not None:
                await tg.start(self.inbox.run, name="probe-inbox")
            task_status.started()
