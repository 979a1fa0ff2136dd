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

While :meth:`TrainingIntake.run` runs it also keeps a :class:`~learnerd.ml.train_runner.WarmSpare`
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

from learnerd.config import Config
from learnerd.daemon.cycle_eta import CycleEta
from learnerd.daemon.debounce import Debouncer
from learnerd.daemon.filewatch import DocumentWatcher
from learnerd.daemon.probe_inbox import ProbeInbox
from learnerd.daemon.rpc import RpcServer
from learnerd.daemon.workqueue import RateLimitingQueue
from learnerd.ml.train_runner import WarmSpare
from learnerd.store.probe_journal import ProbeJournal

log = structlog.get_logger(__name__)


class TrainingTarget(Protocol):
    """What the intake needs of the training reconciler (``learnerd.reconcilers.training``)."""

    journal: ProbeJournal | None
    spare: WarmSpare | None

    @property
    def in_flight(self) -> Mapping[str, float]: ...

    @property
    def recent_cycles_s(self) -> Sequence[float]: ...


class TrainingIntake:
    """The training queue's producers (see the module docstring).

    Args:
        cfg: ``[training]`` (debounce, rescan, warm spare), ``[analyzer]`` (watchfiles' debounce and
            polling switch) and ``[rpc]`` (address, capacity) are read.
        target: the training reconciler.
        queue: the "training" workqueue.
        roots: directories watched recursively for documents.
        files: documents watched individually (learnerd's own targets, wherever they are).
        rpc_document: the document injected probes go to.
        rpc_token: the RPC bearer token (required when ``[rpc] listen`` is set).
        workers: the training controller's workers (for the ETA).

    Raises:
        ValueError: ``[rpc] listen`` is set but there is no token or no journal.
    """

    def __init__(
        self,
        cfg: Config,
        target: TrainingTarget,
        queue: RateLimitingQueue[str],
        *,
        roots: Sequence[Path],
        files: Sequence[Path],
        rpc_document: Path,
        rpc_token: str | None = None,
        workers: int = 1,
    ) -> None:
        settings = cfg.training
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
            debounce_ms=cfg.analyzer.debounce_ms,
            force_polling=cfg.analyzer.force_polling,
        )
        self.eta = CycleEta(
            debounce_remaining=self.debouncer.remaining,
            queued=lambda: len(queue),
            in_flight=lambda: target.in_flight,
            recent_cycles_s=lambda: target.recent_cycles_s,
            workers=workers,
        )
        self.inbox: ProbeInbox | None = None
        self.rpc: RpcServer | None = None
        address = cfg.rpc.address()
        if address is not None:
            if target.journal is None or not rpc_token:
                raise ValueError("the RPC server needs a probe journal and a bearer token")
            self.inbox = ProbeInbox(target.journal, capacity=cfg.rpc.capacity, on_accepted=self.debouncer.touch)
            self.rpc = RpcServer(
                self.inbox, token=rpc_token, document=str(rpc_document), eta=self.eta, host=address[0], port=address[1]
            )

    def resync(self) -> int:
        """Put every watched document and every document with pending probes on the queue; return how many."""
        keys = [str(p) for p in self.watcher.scan_now()]
        if self._target.journal is not None:
            keys += self._target.journal.documents()
        for key in dict.fromkeys(keys):
            self._queue.add(key)
        return len(dict.fromkeys(keys))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch, debounce and serve RPC until cancelled; reports started once the watcher is armed and the
        RPC socket is bound.

        Raises:
            OSError: the RPC address cannot be bound.
        """
        async with contextlib.AsyncExitStack() as stack:
            if self._warm_spare:
                self._target.spare = await stack.enter_async_context(WarmSpare())
                stack.callback(setattr, self._target, "spare", None)
            tg = await stack.enter_async_context(anyio.create_task_group())
            self.watcher.scan_now()
            tg.start_soon(self.debouncer.run, name="training-debouncer")
            await tg.start(self.watcher.run, name="document-watcher")
            if self.inbox is not None and self.rpc is not None:
                await tg.start(self.inbox.run, name="probe-inbox")
                await tg.start(self.rpc.serve, name="rpc-server")
            task_status.started()
