"""The admin socket's client, for ``learnerd ctl`` and the commands that prefer a running daemon
(``learnerd backfill``, ``learnerd search``).

Failures become :class:`~learnerd.cmd._common.CommandError` with a message that says what to do:
:class:`DaemonNotRunning` (exit status 3, as ``systemctl status`` uses for an inactive unit) when
there is no socket or nobody accepts on it; exit status 1 when the socket is not ours, the daemon
refuses us (403) or a request fails.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError

if TYPE_CHECKING:
    from learnerd.daemon.config import Config

#: Exit status when no daemon is running.
NOT_RUNNING = 3


class DaemonNotRunning(CommandError):
    """No daemon serves the admin socket."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=NOT_RUNNING)


class DaemonStarting(CommandError):
    """The daemon answered 503: it is up but not ready yet (its embedder is loading)."""


class AdminClient:
    """Synchronous requests to the daemon at ``socket_path`` (one connection per request).

    Args:
        socket_path: ``<state_dir>/learnerd.sock``.
        timeout_s: limit for one request, in seconds.
    """

    def __init__(self, socket_path: Path, timeout_s: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    def _check_socket(self) -> None:
        path = self.socket_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DaemonNotRunning(f"no learnerd daemon is running on {path.parent} (no socket at {path})") from None
        except PermissionError:
            raise CommandError(
                f"permission denied reaching {path}: its directory is not yours "
                f"(owned by uid {_owner(path.parent)}, you are uid {os.getuid()})"
            ) from None
        if not stat.S_ISSOCK(st.st_mode):
            raise CommandError(f"{path} is not a socket")
        if st.st_uid != os.getuid() and os.getuid() != 0:
            raise CommandError(
                f"the socket {path} is not yours: it belongs to uid {st.st_uid}, you are uid {os.getuid()}"
            )

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON answer (text for ``/metrics``).

        Raises:
            DaemonNotRunning: no socket, or nobody accepts on it.
            CommandError: the socket is not ours, the daemon refused us, or answered an error.
        """
        self._check_socket()
        try:
            status, payload = asyncio.run(self._request(method, path, body))
        except ConnectionRefusedError:
            raise DaemonNotRunning(
                f"no learnerd daemon is running on {self.socket_path.parent}: the socket refuses connections "
                "(left by a daemon that died; the next `learnerd run` replaces it)"
            ) from None
        except PermissionError:
            raise CommandError(f"permission denied connecting to {self.socket_path}: the socket is not yours") from None
        except TimeoutError:
            raise CommandError(f"the daemon did not answer {method} {path} within {self.timeout_s:g} s") from None
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise DaemonNotRunning(f"no learnerd daemon is running on {self.socket_path.parent}") from None
            raise CommandError(f"cannot reach the daemon at {self.socket_path}: {exc}") from None
        if status == 403:
            raise CommandError(f"the daemon refused uid {os.getuid()}: only its own user and root may use it")
        if status >= 400:
            message = payload.get("error") if isinstance(payload, dict) else payload
            kind = DaemonStarting if status == 503 else CommandError
            raise kind(f"{method} {path}: {message} (HTTP {status})")
        return payload

    async def _request(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        connector = aiohttp.UnixConnector(path=os.fspath(self.socket_path))
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
                session.request(method, f"http://learnerd{path}", json=body) as response,
            ):
                if response.content_type == "application/json":
                    return response.status, await response.json()
                return response.status, await response.text()
        except aiohttp.ClientConnectorError as exc:
            raise exc.os_error from None  # ConnectionRefusedError, PermissionError, FileNotFoundError


def _owner(path: Path) -> str:
    try:
        return str(os.stat(path).st_uid)
    except OSError:
        return "?"


def client_for(cfg: Config) -> AdminClient:
    """The client of the daemon running on ``cfg.state_dir``."""
    return AdminClient(cfg.layout.socket_path)


def follow_backfill(client: AdminClient, since: float, as_json: bool, poll_s: float = 0.2) -> dict[str, Any]:
    """Start a backfill in the running daemon and poll it until done, showing the blocks done (a bar on a
    terminal, else lines on stdout; neither with ``as_json``); return the finished job.

    Raises:
        DaemonNotRunning: no daemon (the caller may then run offline).
        CommandError: the daemon refused (a backfill already running …), or stopped before it finished.
    """
    from rich.console import Console

    from learnerd.cmd._progress import progress_display

    job = client.call("POST", "/backfill", {"since": since})
    with progress_display(None if as_json else Console(), lines=not as_json) as display:
        while job["state"] == "running":
            display.update("backfill", job["done"], job["blocks"], unit="block")
            time.sleep(poll_s)
            try:
                job = client.call("GET", "/backfill")
            except DaemonNotRunning:
                raise CommandError("the daemon stopped before the backfill finished") from None
        display.update("backfill", job["done"], job["blocks"], unit="block")
    if job["state"] != "done":
        raise CommandError(f"backfill {job['state']}: the daemon stopped before the pipeline was idle")
    return job
