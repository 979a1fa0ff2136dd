"""sd_notify over a real datagram socket: a path and an abstract address; the watchdog's keep-alives."""

from __future__ import annotations

import os
import secrets
import socket

import anyio
import pytest

from learnerd.daemon import sd_notify
from tests.support.daemon import short_tmp_dir


def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + address[1:] if address.startswith("@") else address)
    sock.settimeout(10)
    return sock


def test_nothing_is_sent_without_notify_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify.notify("READY=1") is False


def test_notify_to_a_socket_path(monkeypatch: pytest.MonkeyPatch) -> None:
    with short_tmp_dir() as root:
        address = str(root / "notify")
        with _receiver(address) as receiver:
            monkeypatch.setenv("NOTIFY_SOCKET", address)
            assert sd_notify.notify("READY=1", "STATUS=serving") is True
            assert receiver.recv(4096) == b"READY=1\nSTATUS=serving"


def test_notify_to_an_abstract_address(monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"@learnerd-test-{secrets.token_hex(8)}"
    with _receiver(address) as receiver:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        assert sd_notify.reloading() is True
        lines = receiver.recv(4096).decode().split("\n")
        assert lines[0] == "RELOADING=1" and lines[1].startswith("MONOTONIC_USEC=")
        assert int(lines[1].split("=")[1]) > 0


def test_a_missing_supervisor_socket_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent/notify")
    assert sd_notify.notify("STOPPING=1") is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert sd_notify.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert sd_notify.watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert sd_notify.watchdog_interval() is None, "meant for another process"
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    monkeypatch.setenv("WATCHDOG_USEC", "soon")
    assert sd_notify.watchdog_interval() is None


@pytest.mark.anyio
async def test_keep_alive_pings_every_half_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"@learnerd-test-{secrets.token_hex(8)}"
    with _receiver(address) as receiver:
        receiver.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "100000")  # 0.1 s: a ping every 0.05 s
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        with anyio.move_on_after(0.5):
            await sd_notify.keep_alive()
        pings = []
        while True:
            try:
                pings.append(receiver.recv(64))
            except BlockingIOError:
                break
    assert len(pings) >= 3 and set(pings) == {b"WATCHDOG=1"}
