"""``learnerd run`` in a subprocess, with a systemd-style notification socket to know when it is ready."""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from learnerd.cmd._client import AdminClient
from tests.conftest import cli_env, learnerd_command

#: Generous: the daemon loads torch and MiniLM on a shared 2-core machine.
START_TIMEOUT_S = 180.0

CONFIG = """\
state_dir = "state"
log_dirs = ["logs"]

[analyzer]
poll_interval_s = 0.2

[shutdown]
drain_timeout_s = 120.0

[training]          # these tests are about operating the daemon, not about training adapters
enabled = false
"""


class NotifyReceiver:
    """A datagram socket on an abstract address, as systemd's ``$NOTIFY_SOCKET``."""

    def __init__(self) -> None:
        self.address = f"@learnerd-test-{secrets.token_hex(8)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.address[1:])
        self.messages: list[str] = []

    def received(self, assignment: str, timeout: float) -> bool:
        """Receive for up to ``timeout`` seconds until a message holds the line ``assignment``; whether one does."""
        deadline = time.monotonic() + timeout
        while not any(assignment in m.split("\n") for m in self.messages):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue
        return True

    def wait_for(self, assignment: str, timeout: float = START_TIMEOUT_S) -> list[str]:
        """Receive until a message holds the line ``assignment``; return the messages received so far.

        Raises:
            AssertionError: none did within ``timeout`` seconds.
        """
        if not self.received(assignment, timeout):
            raise AssertionError(f"no {assignment} within {timeout:g} s; got {self.messages}")
        return self.messages

    def close(self) -> None:
        self.sock.close()


class DaemonProcess:
    """One ``learnerd run --config <root>/learnerd.toml`` with its stderr in ``<root>/<name>.log``."""

    def __init__(self, root: Path, *args: str, name: str = "daemon", env: dict[str, str] | None = None) -> None:
        self.root = root
        self.log_path = root / f"{name}.log"
        self.notify = NotifyReceiver()
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                learnerd_command("run", "--config", str(root / "learnerd.toml"), *args),
                env=cli_env(NOTIFY_SOCKET=self.notify.address, **(env or {})),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    @property
    def socket(self) -> Path:
        return self.root / "state" / "learnerd.sock"

    def client(self) -> AdminClient:
        return AdminClient(self.socket, timeout_s=30)

    def wait_ready(self) -> None:
        try:
            self.notify.wait_for("READY=1")
        except AssertionError:
            raise AssertionError(f"daemon not ready; its log:\n{self.log_text()[-3000:]}") from None

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        """Every stderr line as JSON (fails on a line that is not one JSON object)."""
        return [json.loads(line) for line in self.log_text().splitlines() if line.strip()]

    def stop(self) -> None:
        """Kill it if still running, and close the notification socket."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.notify.close()


@contextlib.contextmanager
def daemon_process(root: Path, *args: str, name: str = "daemon", **kw: Any) -> Iterator[DaemonProcess]:
    process = DaemonProcess(root, *args, name=name, **kw)
    try:
        yield process
    finally:
        process.stop()


def wait_until(predicate, timeout: float = 120.0, what: str = "condition", interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {timeout:g} s")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a daemon that cannot report the port it bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
