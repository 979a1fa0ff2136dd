"""Run one training job in a child process (:mod:`learnerd.training.worker`) from async code.

:func:`run_training` starts ``python -m learnerd.training.worker`` with anyio, sends it the request,
streams its progress events to a callback and to the log, and returns its result. Training never
blocks the caller's event loop: the parent only reads pipes.

Cancellation: cancelling the awaiting task terminates the child (SIGTERM, then SIGKILL after
``terminate_grace_s``) before the cancellation propagates; the child writes nothing but its
``output_dir``, which the caller owns and removes (``AdapterStore.stage`` does). If the parent itself
dies (``kill -9`` included), the kernel kills the child at once (``PR_SET_PDEATHSIG``; see
:mod:`learnerd.training.worker`); elsewhere than Linux the child sees its stdin close and exits.

Start-up: a child spends seconds starting Python and importing torch, transformers and peft before
it can train. A long-lived caller (the daemon) hides that with a :class:`WarmSpare`: one child started
ahead of need, imports done, waiting for its request; each job takes it and a new spare is started
when the job ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream

import learnerd
from learnerd.ml.threads import passive_openmp
from learnerd.training.lora import PhaseEvent, ProgressEvent, TrainingResult
from learnerd.training.worker import PARENT_PID_ENV, TrainingRequest

log = structlog.get_logger(__name__)

MAX_LINE_BYTES = 16 * 1024 * 1024
LOG_INTERVAL_S = 1.0
"""Progress is logged at info level at most this often (and for the last step); every step at debug."""


class TrainingFailed(Exception):
    """The training process reported an error, crashed or was killed.

    ``permanent`` is True when retrying cannot help (an unusable base model, a row the tokenizer
    cannot encode); ``returncode`` is the child's exit status (negative: killed by that signal).
    """

    def __init__(self, message: str, *, permanent: bool = False, returncode: int | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.returncode = returncode


class _Child:
    """A started worker process and the buffered reader of its protocol stream (stdout)."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self.process = process
        self.events = BufferedByteReceiveStream(process.stdout)

    @classmethod
    async def spawn(cls, python: str) -> _Child:
        return cls(await anyio.open_process([python, "-m", "learnerd.training.worker"], env=_child_env()))


class WarmSpare:
    """Keeps one training process started ahead of need (see the module docstring).

    Use as ``async with WarmSpare() as spare:`` around the daemon's lifetime and pass ``spare`` to
    :func:`run_training`; leaving the block kills the idle spare (were the daemon killed instead, the
    kernel kills the spare with it). One spare serves one job at a time; concurrent jobs beyond
    the first start cold.
    """

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._spare: _Child | None = None
        self._closed = False

    async def __aenter__(self) -> WarmSpare:
        await self.refill()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = True
        spare, self._spare = self._spare, None
        if spare is not None:
            with anyio.CancelScope(shield=True):
                await _stop(spare.process, grace_s=1.0)
                await spare.process.aclose()

    @property
    def pid(self) -> int | None:
        """The idle spare's pid, or None when there is none."""
        return self._spare.process.pid if self._spare is not None else None

    async def refill(self, wait_ready: bool = False) -> None:
        """Start a spare unless one is waiting; with ``wait_ready``, return once its imports are done."""
        if self._closed:
            return
        if self._spare is None or self._spare.process.returncode is not None:
            self._spare = await _Child.spawn(self.python)
        if wait_ready:
            async for event in _events(self._spare.events):
                if event.get("event") == "ready":
                    break

    async def _take(self) -> _Child:
        spare, self._spare = self._spare, None
        if spare is None or spare.process.returncode is not None:
            return await _Child.spawn(self.python)
        return spare


class ProcessUsage:
    """What a running training process uses, read with psutil (:meth:`read`).

    Args:
        pid: the process.
        min_interval_s: reads sooner than this after the previous one return it again (a CPU share over a
            shorter window says little).
    """

    def __init__(self, pid: int, min_interval_s: float = 1.0) -> None:
        import psutil

        self.pid = pid
        self._process = psutil.Process(pid)
        self._min_interval_s = min_interval_s
        self._last = (time.monotonic(), self._cpu_s())
        self._read: dict[str, float] = {}

    def _cpu_s(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def read(self) -> dict[str, float]:
        """``cpu_share``: the cores the process kept busy on average since the previous read (or since this object
        was made; 1.0 is one core), ``rss_mb``: its resident memory now, ``peak_rss_mb``: its peak (Linux's
        ``VmHWM``; absent elsewhere), in MiB; empty once the process is gone."""
        import psutil

        now = time.monotonic()
        if now - self._last[0] < self._min_interval_s and self._read:
            return self._read
        try:
            if self._process.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: nothing to read
                return {}
            cpu_s, rss = self._cpu_s(), self._process.memory_info().rss
        except psutil.Error:
            return {}
        share = (cpu_s - self._last[1]) / max(now - self._last[0], 1e-9)
        self._last = (now, cpu_s)
        self._read = {"cpu_share": round(share, 2), "rss_mb": round(rss / 2**20, 1)}
        with contextlib.suppress(OSError, ValueError, IndexError):  # not Linux, or it exited since
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self._read["peak_rss_mb"] = round(int(line.split()[1]) / 1024, 1)
        return self._read


async def run_training(
    request: TrainingRequest,
    *,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    spare: WarmSpare | None = None,
    python: str = sys.executable,
    terminate_grace_s: float = 5.0,
    on_phase: Callable[[PhaseEvent], None] | None = None,
) -> TrainingResult:
    """Train ``request`` in a child process and return its :class:`TrainingResult`.

    Args:
        request: what to train; ``request.output_dir`` receives the adapter files.
        on_progress: called in the event loop with every :class:`ProgressEvent` (after each step).
        on_start: called with the child's pid once it has the request.
        on_phase: called in the event loop with every :class:`PhaseEvent` (loading the base, the base's answers,
            the start and final losses).
        spare: take the child from this :class:`WarmSpare` (and refill it afterwards) instead of
            starting one; ``python`` is then the spare's.
        python: the interpreter to run the worker with.
        terminate_grace_s: seconds between SIGTERM and SIGKILL when the call is cancelled.

    Raises:
        TrainingFailed: the child reported an error, exited without a result or was killed.
    """
    child = await spare._take() if spare is not None else await _Child.spawn(python)
    try:
        return await _run(child, request, on_progress, on_start, terminate_grace_s, on_phase)
    finally:
        if spare is not None:
            with anyio.CancelScope(shield=True):
                await spare.refill()


async def _run(
    child: _Child,
    request: TrainingRequest,
    on_progress: Callable[[ProgressEvent], None] | None,
    on_start: Callable[[int], None] | None,
    terminate_grace_s: float,
    on_phase: Callable[[PhaseEvent], None] | None = None,
) -> TrainingResult:
    process = child.process
    assert process.stdin is not None and process.stderr is not None
    bound = log.bind(pid=process.pid)
    bound.info("training.started", rows=len(request.rows), base_model=request.base_model_path,
               resume_from=request.resume_from, output_dir=request.output_dir)  # fmt: skip
    if on_start is not None:
        on_start(process.pid)
    stderr_tail: deque[str] = deque(maxlen=20)
    outcome: dict[str, Any] = {}
    try:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.send((request.to_json() + "\n").encode())  # if it died at once, its status says why
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain_stderr, process.stderr, stderr_tail, bound)
            last_logged = float("-inf")
            async for event in _events(child.events):
                kind = event.pop("event", None)
                if kind == "progress":
                    progress = ProgressEvent(**event)
                    now = time.monotonic()
                    level = bound.debug
                    if now - last_logged >= LOG_INTERVAL_S or progress.step == progress.total_steps:
                        level, last_logged = bound.info, now
                    level("training.progress", step=progress.step, total_steps=progress.total_steps,
                          loss=round(progress.loss, 4), tokens=progress.tokens)  # fmt: skip
                    if on_progress is not None:
                        on_progress(progress)
                elif kind == "phase":
                    phase = PhaseEvent(**event)
                    if phase.done == 0:
                        bound.info("training.phase", phase=phase.phase, total=phase.total, unit=phase.unit)
                    if on_phase is not None:
                        on_phase(phase)
                elif kind in ("result", "error"):
                    outcome = {"kind": kind, **event}
        returncode = await process.wait()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _stop(process, terminate_grace_s)
        bound.warning("training.stopped", returncode=process.returncode)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
    if outcome.get("kind") == "result" and returncode == 0:
        result = TrainingResult.from_dict({k: v for k, v in outcome.items() if k != "kind"})
        bound.info("training.finished", steps=result.steps, start_loss=round(result.start_loss, 4),
                   final_loss=round(result.final_loss, 4), tokens=result.tokens_trained,
                   tokens_computed=result.tokens_computed, train_s=round(result.train_s, 2),
                   peak_rss_mb=result.peak_rss_mb)  # fmt: skip
        return result
    if outcome.get("kind") == "error":
        message = f"{outcome.get('type')}: {outcome.get('message')}"
        bound.error("training.failed", error=message, permanent=bool(outcome.get("permanent")))
        raise TrainingFailed(message, permanent=bool(outcome.get("permanent")), returncode=returncode)
    message = f"training process {_describe_exit(returncode)} without a result"
    if stderr_tail:
        message += ": " + " | ".join(stderr_tail)
    bound.error("training.failed", error=message, returncode=returncode)
    raise TrainingFailed(message, returncode=returncode)


async def _events(buffered: BufferedByteReceiveStream) -> AsyncIterator[dict[str, Any]]:
    while True:
        try:
            line = await buffered.receive_until(b"\n", MAX_LINE_BYTES)
        except (anyio.IncompleteRead, anyio.EndOfStream):
            return
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("training.bad_event", line=line[:200].decode("utf-8", "replace"))
            continue
        if isinstance(event, dict):
            yield event


async def _drain_stderr(stream: ByteReceiveStream, tail: deque[str], bound: Any) -> None:
    buffered = BufferedByteReceiveStream(stream)
    while True:
        try:
            raw = await buffered.receive_until(b"\n", MAX_LINE_BYTES)
        except (anyio.IncompleteRead, anyio.EndOfStream):
            return
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            tail.append(line)
            bound.debug("training.stderr", line=line)


async def _stop(process: Process, grace_s: float) -> None:
    if process.returncode is not None:
        return
    try:
        process.terminate()
        with anyio.move_on_after(grace_s):
            await process.wait()
            return
        process.kill()
        await process.wait()
    except ProcessLookupError:
        return


def _describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _child_env() -> dict[str, str]:
    """The parent's environment, with this learnerd first on PYTHONPATH, Hugging Face offline, OpenMP's passive
    wait (:func:`learnerd.ml.threads.passive_openmp`), and the parent's pid (the child dies with it)."""
    env = dict(os.environ)
    passive_openmp(env)
    env[PARENT_PID_ENV] = str(os.getpid())
    package_root = str(Path(learnerd.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env
