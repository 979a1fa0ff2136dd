"""What a training process uses, as ``ctl status`` shows it (learnerd/training/runner.py's ``ProcessUsage``): read
from a real process, and never an error once it has exited (a zombie not yet reaped, then gone)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from learnerd.training.runner import ProcessUsage

BUSY = "data = b'x' * (64 * 2**20)\nwhile True:\n    sum(range(10000))\n"  # 64 MiB resident, one core busy


def test_cpu_share_and_memory_of_a_busy_process_then_nothing_once_it_exits():
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        usage = ProcessUsage(child.pid, min_interval_s=0.0)
        process = psutil.Process(child.pid)
        deadline = time.monotonic() + 120
        while process.memory_info().rss < 64 * 2**20 or sum(process.cpu_times()[:2]) < 0.2:
            assert time.monotonic() < deadline, "the child never got going"
            time.sleep(0.05)
        read = usage.read()
        assert read["cpu_share"] > 0
        assert read["rss_mb"] >= 64 and read["peak_rss_mb"] >= read["rss_mb"]
    finally:
        child.kill()
    deadline = time.monotonic() + 60
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert usage.read() == {}, "exited, not yet reaped"
    child.wait()
    assert usage.read() == {}, "gone"
