"""The inbox of injected probes: a bounded queue in front of the probe journal, with group commit.

:meth:`ProbeInbox.submit` returns once the probe is fsynced in the journal
(:class:`learnerd.store.probe_journal.ProbeJournal`) — never before, so a 200 answer means the probe
survives a crash. Probes submitted while a write is under way are written together by the next one: a
burst of N concurrent pushes costs far fewer than N fsyncs (one committer task, :meth:`ProbeInbox.run`,
does every write in a worker thread; the event loop never waits on the disk).

Capacity: the inbox is *full* when the probes pending in the journal (accepted, not yet written into
their document) plus those being written reach ``capacity``; :meth:`ProbeInbox.submit` then raises
:class:`InboxFull` (HTTP 429). The training reconciler consumes pending probes at each cycle boundary.

After each write, ``on_accepted(document)`` is called once per document of the batch: the daemon uses
it to start a training cycle (through the debouncer), so a push triggers a cycle on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from learnerd.store.probe_journal import InjectedProbe, ProbeJournal

log = structlog.get_logger(__name__)


class InboxFull(Exception):
    """``capacity`` probes are pending: the probe was not accepted."""


class InboxClosed(Exception):
    """The inbox's committer is not running (the daemon is stopping): the probe was not accepted."""


@dataclass
class _Submission:
    probe: InjectedProbe
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None


class ProbeInbox:
    """Accepts probes into ``journal`` (see the module docstring). Use from the event loop's thread.

    Args:
        journal: the durable store of accepted probes.
        capacity: probes pending at most (>= 1).
        on_accepted: called with each document that received probes, after they are durable.
    """

    def __init__(
        self, journal: ProbeJournal, *, capacity: int = 1000, on_accepted: Callable[[str], None] | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity}")
        self.journal = journal
        self.capacity = capacity
        self._on_accepted = on_accepted
        self._reserved = 0  # submitted, not yet durable (or failed)
        self._send: MemoryObjectSendStream[_Submission] | None = None
        self.batches = 0  # journal writes so far (each one fsync)
        self.accepted = 0

    @property
    def depth(self) -> int:
        """Probes pending: durable in the journal and not yet consumed, plus those being written."""
        return len(self.journal) + self._reserved

    async def submit(self, probe: InjectedProbe) -> int:
        """Journal ``probe`` durably; return the depth afterwards (this probe included).

        Raises:
            InboxFull: ``capacity`` probes are already pending (nothing was written).
            InboxClosed: :meth:`run` is not running.
            OSError: the journal write failed (the probe was not accepted).
        """
        if self._send is None:
            raise InboxClosed("the probe inbox is not running")
        if self.depth >= self.capacity:
            raise InboxFull(f"probe queue at capacity ({self.capacity} probes pending)")
        submission = _Submission(probe)
        self._reserved += 1
        try:
            try:
                self._send.send_nowait(submission)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise InboxClosed("the probe inbox stopped") from None
            await submission.done.wait()
        finally:
            self._reserved -= 1
        if submission.error is not None:
            raise submission.error
        return self.depth

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The committer: write submissions in groups until cancelled. Submissions left when it stops
        fail with :class:`InboxClosed`."""
        send, receive = anyio.create_memory_object_stream[_Submission](math.inf)
        self._send = send
        try:
            task_status.started()
            await self._commit_loop(receive)
        finally:
            self._send = None
            send.close()
            for submission in _drain(receive):
                submission.error = InboxClosed("the probe inbox stopped")
                submission.done.set()

    async def _commit_loop(self, receive: MemoryObjectReceiveStream[_Submission]) -> None:
        async for first in receive:
            batch = [first, *_drain(receive)]
            probes = [s.probe for s in batch]
            error: BaseException | None = None
            try:
                with anyio.CancelScope(shield=True):  # a write under way finishes, so its waiters get an answer
                    await anyio.to_thread.run_sync(self.journal.append, probes)
            except (OSError, ValueError) as exc:
                error = exc
                log.error("probe journal write failed; probes refused", error=str(exc), probes=len(batch))
            for submission in batch:
                submission.error = error
                submission.done.set()
            if error is None:
                self.batches += 1
                self.accepted += len(batch)
                if self._on_accepted is not None:
                    for document in dict.fromkeys(p.document for p in probes):
                        self._on_accepted(document)


def _drain(receive: MemoryObjectReceiveStream[_Submission]) -> list[_Submission]:
    out: list[_Submission] = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return out
