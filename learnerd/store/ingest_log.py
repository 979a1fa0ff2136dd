"""The block-log files learnerd writes itself: events accepted over HTTP (``POST /v1/blocks``), made durable
before they are acknowledged and then ingested by the analyzer like any log line.

Files: ``<state_dir>/ingest/http-YYYYMMDD.jsonl`` (the UTC day of the append), mode 0600, in learnerd's
block-log format (``docs/block-log-format.md``): one event per line, UTF-8, LF-terminated. The daemon adds
the directory to the analyzer's log directories, so these lines take the analyzer's path: watermarked,
one transaction per batch, exactly once across crashes (:mod:`learnerd.analyzer.analyzer`).

:meth:`IngestLog.append` writes a request's lines with one ``write(2)`` on an ``O_APPEND`` descriptor and
returns after ``fsync(2)`` (and, the first time this process appends to a file, an fsync of the directory,
so a new file's name survives too): the server answers 200 only after that, so an acknowledged event
survives a crash or a power loss. A failed write or fsync cuts the file back to its size before the append
(:func:`~learnerd.store.atomic.append_synced`): nothing of the request stays behind.

A power loss in the middle of an append can still leave a torn last line (never acknowledged). The next
append first ends it with a LF, so the torn bytes become one malformed line (counted and logged by the
analyzer) instead of corrupting the next event; complete lines of that unacknowledged request may be
ingested, which a client's retry cannot duplicate (merging an event twice changes nothing).

Files of past days are complete: once the analyzer has read them they may be deleted (it drops a deleted
file's watermark). Thread-safe: appends take the log's lock (the RPC server appends from worker threads).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from learnerd.store.atomic import append_synced, fsync_dir

FILE_PREFIX = "http-"
"""Files are ``http-YYYYMMDD.jsonl``: the prefix names the intake that wrote them."""


class IngestLog:
    """Appends block-log lines to the day's file under ``directory`` (created 0700 if missing).

    Args:
        directory: where the files live (``StateLayout.ingest_dir``).
        clock: wall clock, epoch seconds: picks the day's file.

    Raises:
        OSError: the directory cannot be created.
    """

    def __init__(self, directory: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self._clock = clock
        self._lock = threading.Lock()
        self._synced: set[Path] = set()  # files whose directory entry this process has fsynced
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fsync_dir(self.directory.parent)

    def path_for(self, when: float) -> Path:
        """The file that appends at ``when`` (epoch seconds) go to: ``http-YYYYMMDD.jsonl``, the UTC day."""
        return self.directory / f"{FILE_PREFIX}{datetime.fromtimestamp(when, UTC):%Y%m%d}.jsonl"

    def append(self, lines: Sequence[bytes]) -> Path:
        """Append ``lines`` (each one whole block-log line ending in LF) to today's file; when this returns
        they are durable. Returns the file written.

        Raises:
            OSError: the write or an fsync failed; nothing of ``lines`` is left in the file (see the module
                docstring) and none counts as accepted.
        """
        data = b"".join(lines)
        with self._lock:
            path = self.path_for(self._clock())
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
                append_synced(fd, b"\n" + data if torn else data)
            finally:
                os.close(fd)
            if path not in self._synced:
                fsync_dir(self.directory)
                self._synced.add(path)
        return path
