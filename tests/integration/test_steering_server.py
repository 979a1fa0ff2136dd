""":class:`learnerd.steering.server.ExternalServer` with real processes: a server that exits before it is
healthy, or never becomes healthy, is an error naming why, and leaves no process behind."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from learnerd.steering.server import ExternalServer, ServerError
from learnerd.steering.settings import ServerSettings


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/health"


def _running_in_group(pgid: int) -> dict[int, dict[str, str]]:
    """``{pid: fields of /proc/PID/status}`` of the processes of group ``pgid`` that are not zombies
    (Linux /proc/PID/stat: state, ppid, pgrp)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid or fields[0] == "Z":
                continue
            status = (stat.parent / "status").read_text()  # only for the group's own processes
        except OSError:
            continue
        found[int(stat.parent.name)] = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    return found


def _handles_sighup_by_default(status: dict[str, str]) -> bool:
    """Whether SIGHUP (bit 0 of the masks) is neither blocked nor ignored in a /proc/PID/status."""
    return not any(int(status[mask], 16) & 1 for mask in ("SigBlk", "SigIgn"))


def test_a_server_that_exits_before_it_is_ready_is_an_error(tmp_path):
    settings = ServerSettings(start="echo loading {steering}; exit 3", health_url=_closed_port_url())
    with ExternalServer(settings, tmp_path / "server.log") as server, pytest.raises(ServerError) as info:
        server.restart(tmp_path / "deltas current.json")
    assert "exited with status 3 before it was ready" in str(info.value)
    assert (tmp_path / "server.log").read_text() == f"loading {tmp_path / 'deltas current.json'}\n"  # quoted


def test_a_server_never_healthy_is_stopped_after_ready_timeout(tmp_path):
    settings = ServerSettings(start="exec sleep 60", health_url=_closed_port_url(), ready_timeout_s=0.5)
    server = ExternalServer(settings, tmp_path / "server.log")
    with pytest.raises(ServerError, match=r"not ready after 0.5 s \(\d+ tries; last: .*see .*server.log"):
        server.restart(tmp_path / "deltas.json")
    assert server.process is None and server.starts == 1


def test_a_stop_request_ends_the_wait_and_stop_signals_the_process_group(tmp_path):
    settings = ServerSettings(start="sleep 60 & exec sleep 60", health_url=_closed_port_url(), stop_signal="SIGHUP")
    server = ExternalServer(settings, tmp_path / "server.log")
    stop = threading.Event()
    stop.set()
    server.restart(tmp_path / "deltas.json", stop)  # returns at once: the run is stopping
    process = server.process
    assert process is not None and process.poll() is None
    deadline = time.monotonic() + 30.0  # the shell forks its background sleep, then execs the other one
    while True:
        group = _running_in_group(process.pid)
        names = [status["Name"] for status in group.values()]
        if names == ["sleep", "sleep"] or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert names == ["sleep", "sleep"]
    assert all(map(_handles_sighup_by_default, group.values())), f"SIGHUP blocked or ignored: {group}"
    server.stop()
    assert process.returncode == -1  # SIGHUP, to the whole group (the background sleep too)
    for _ in range(200):  # the background sleep gets the signal at once, but may need a moment to exit
        if not _running_in_group(process.pid):
            break
        time.sleep(0.05)
    assert _running_in_group(process.pid) == {}
