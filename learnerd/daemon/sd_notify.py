"""systemd's notification protocol (``sd_notify(3)``), without libsystemd.

With ``Type=notify`` systemd passes ``$NOTIFY_SOCKET``: a Unix datagram socket, given as a path or,
starting with ``@``, as an abstract address. Each notification is one datagram of newline-separated
``KEY=VALUE`` assignments: ``READY=1`` (start-up is complete), ``STOPPING=1`` (shutdown began),
``RELOADING=1`` with ``MONOTONIC_USEC=`` (a reload began; ``READY=1`` ends it), ``STATUS=…`` (a line
for ``systemctl status``) and ``WATCHDOG=1`` (a keep-alive, expected every ``$WATCHDOG_USEC``
microseconds when ``WatchdogSec=`` is set). Without ``$NOTIFY_SOCKET`` every call does nothing.
"""

from __future__ import annotations

import os
import socket
import time

import anyio
import structlog

log = structlog.get_logger(__name__)


def _address() -> str | None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return None
    return "\0" + address[1:] if address.startswith("@") else address


def notify(*assignments: str) -> bool:
    """Send ``assignments`` (e.g. ``"READY=1"``, ``"STATUS=serving"``) as one datagram.

    Returns:
        True when sent; False when ``$NOTIFY_SOCKET`` is unset or sending failed (logged, never raised:
        a supervisor's socket going away must not take the daemon down).
    """
    address = _address()
    if address is None:
        return False
    message = "\n".join(assignments).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message, address)
    except OSError as exc:
        log.warning("sd_notify failed", socket=os.environ.get("NOTIFY_SOCKET"), error=str(exc))
        return False
    return True


def reloading() -> bool:
    """``RELOADING=1`` with the ``CLOCK_MONOTONIC`` time in microseconds, as ``Type=notify-reload`` wants."""
    return notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")


def watchdog_interval() -> float | None:
    """Seconds between keep-alives (half of ``$WATCHDOG_USEC``), or None when no watchdog is asked for
    (unset, malformed, or meant for another process by ``$WATCHDOG_PID``)."""
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2e6 if usec > 0 else None


async def keep_alive() -> None:
    """Send ``WATCHDOG=1`` every :func:`watchdog_interval` seconds until cancelled (returns at once
    without a watchdog). Sent from the event loop, so a loop blocked for longer than ``WatchdogSec``
    gets the daemon restarted."""
    interval = watchdog_interval()
    if interval is None:
        return
    while True:
        notify("WATCHDOG=1")
        await anyio.sleep(interval)
