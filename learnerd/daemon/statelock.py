"""One daemon per state directory: an exclusive ``flock(2)`` on ``<state_dir>/learnerd.lock``.

The kernel drops the lock when the process dies, however it dies (``kill -9`` included), so a
crashed daemon never leaves a stale lock behind, and a live daemon's lock can never be taken.
The file holds the owner's pid, for the refusal message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from learnerd.store.state_dir import secure_state_dir


class StateDirBusy(RuntimeError):
    """Another learnerd process holds the state directory."""


class StateLock:
    """Holds the state directory's lock from :meth:`acquire` until :meth:`release` (or process exit)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "learnerd.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Secure the state directory, then take the lock.

        Raises:
            UnsafeStateDir: the directory is not ours or holds another user's files
                (:func:`~learnerd.store.state_dir.secure_state_dir`); nothing was created in it.
            StateDirBusy: another process holds the lock (its pid is named).
        """
        secure_state_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateDirBusy(
                f"another learnerd (pid {holder}) is already running on {self.path.parent}; "
                "stop it first, or use another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
