"""The CLI run in the test's own process: for commands a test runs several times, where one interpreter's start
(torch's import, MiniLM's load) per run is most of the cost."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys


def run_cli_here(*args: str, check: bool = True, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``learnerd ARGS`` in this process, as :func:`tests.support.pipeline.run_cli` does in a subprocess: the
    same parser and command (:func:`learnerd.cmd.main.main`), under the CLI's umask, reading ``stdin`` (then end
    of input), its stdout and stderr captured; an exit by argparse is its status. Logging, which the command
    points at the captured stderr, is pointed back at this process's stderr afterwards (its level kept). With
    ``check``, fail with its stderr on a non-zero exit."""
    from learnerd.cmd.main import PRIVATE_UMASK, main
    from learnerd.daemon.logging import configure_logging, current_level

    level, umask = current_level(), os.umask(PRIVATE_UMASK)
    out, err, saved_stdin = io.StringIO(), io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(args))
            except SystemExit as exc:  # argparse's usage errors (and --help: no status, 0)
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        sys.stdin = saved_stdin
        os.umask(umask)
        configure_logging(level)
    proc = subprocess.CompletedProcess(["learnerd", *args], status, out.getvalue(), err.getvalue())
    if check and status != 0:
        raise AssertionError(f"learnerd {' '.join(args)} exited {status}:\n{proc.stderr[-4000:]}")
    return proc
