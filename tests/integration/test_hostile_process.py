"""Issue 14, case 14: the training child dies with its parent.

A real daemon-side parent (a Python process holding a :class:`~learnerd.training.runner.WarmSpare`) is
killed with SIGKILL; its training child — stopped with SIGSTOP first, as a child deep in a long torch
call would not read its stdin either — must be gone (dead or a zombie awaiting its reaper), never left
running or stopped. Before the fix the child noticed only its stdin closing, which a busy or stopped
child never reads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from tests.conftest import cli_env

PARENT = """
import anyio
from learnerd.training.runner import WarmSpare

async def main():
    async with WarmSpare() as spare:
        await spare.refill(wait_ready=True)
        print(spare.pid, flush=True)
        await anyio.sleep(3600)

anyio.run(main)
"""


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_the_training_child_dies_with_a_killed_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=cli_env())
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(child, signal.SIGSTOP)  # a child that does not run cannot notice its stdin closing
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60.0  # a generous bound for a loaded machine; the kernel acts at once
        while _state(child) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(child) in (None, "Z"), f"the training child {child} outlived its parent (state {_state(child)})"
    finally:
        parent.kill()
        if child is not None and _state(child) not in (None, "Z"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
