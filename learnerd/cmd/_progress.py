"""Progress of the long commands (``train``, ``eval``, ``evolve``, ``backfill``, ``run --once``): a rich bar
on a terminal, lines of text everywhere else.

When stdout is not a terminal (systemd's journal, CI, ``nohup``, ``> out 2>&1``) and does not carry the
command's JSON (``--json``), each piece of work — a *task* — prints lines on stdout, flushed at once::

    train notes.dlm: base answers 48/152 · 12 s/answer · cpu 98% · rss 1.1 GiB (peak 1.2 GiB) · ETA 21m
    train notes.dlm: training step 40/96 · 2.1 s/step · loss 0.41 · cpu 97% · rss 1.2 GiB (peak 1.4 GiB) · ETA 2m

one when it starts and one when it enters a new phase (its ``phase`` field: a training process's ``loading base``,
``base answers``, ``start loss``, ``training step``, ``final loss``), then one whenever a step is done and
:data:`LINE_INTERVAL_S` seconds have passed since the task's last line or another tenth of its total is done
(whichever comes first), and a last one when it ends (``done in …``, or ``stopped after …`` when the command
failed or was interrupted). The pace and the
time left are :class:`~learnerd.runtime.progress.StepProgress`'s: measured from the first step of the phase, so
loading a model does not count as a step. Lines go to stdout because stderr carries the log, one JSON object per line
when it is not a terminal.

On a terminal, the command's rich bar is drawn on the console it passes (only when that console is a
terminal, so a file never gets escape sequences).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from learnerd.cmd._render import describe_fields, describe_usage, duration, progress_line
from learnerd.runtime.progress import StepProgress

LINE_INTERVAL_S = 10.0
"""A task prints a line at least this often (seconds) while its steps advance."""
LINE_PARTS = 10
"""A task also prints a line each time another ``1 / LINE_PARTS`` of its total is done."""


class ProgressDisplay(Protocol):
    """Where a command reports its tasks' progress (see the module docstring)."""

    def update(self, task: str, step: int, total: int | None = None, /, *, unit: str = "step", **fields: Any) -> None:
        """``step`` of ``total`` ``unit``\\ s of ``task`` are done (``total`` None: not known yet); ``fields`` are
        shown beside them as ``name value`` (None: not shown). The first update of a task starts it."""
        ...

    def finish(self, task: str) -> None:
        """``task`` is done (its last line); a later update starts it again."""
        ...


@dataclass
class _LineTask:
    progress: StepProgress
    unit: str
    fields: dict[str, Any] = field(default_factory=dict)
    printed_step: int = 0
    printed_at: float = 0.0
    started: float = field(default=0.0)  # when the task started (its phases each start a new ``progress``)


class LineDisplay:
    """Progress as lines on ``stream`` (see the module docstring).

    Args:
        stream: where the lines go (flushed after each).
        clock: monotonic seconds.
    """

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._tasks: dict[str, _LineTask] = {}

    def update(self, task: str, step: int, total: int | None = None, /, *, unit: str = "step", **fields: Any) -> None:
        t = self._tasks.get(task)
        if t is None:
            t = self._tasks[task] = _LineTask(StepProgress(self._clock), unit, started=self._clock())
            t.progress.update(step, total)
            t.fields.update(fields)
            self._print(task, t, "starting" if step == 0 else None)
            return
        if fields.get("phase") is not None and fields["phase"] != t.fields.get("phase"):
            t.progress, t.unit = StepProgress(self._clock), unit
            t.progress.update(step, total)
            t.fields.update(fields)
            self._print(task, t, None)
            return
        t.progress.update(step, total)
        t.fields.update(fields)
        t.unit = unit
        total = t.progress.total
        if step == t.printed_step:
            return
        if self._clock() - t.printed_at >= LINE_INTERVAL_S or (
            total and step < total and step * LINE_PARTS // total > t.printed_step * LINE_PARTS // total
        ):
            self._print(task, t, None)

    def finish(self, task: str, *, stopped: bool = False) -> None:
        """The last line of ``task``: ``done in …`` (``stopped``: ``stopped after …``)."""
        t = self._tasks.pop(task, None)
        if t is not None:
            elapsed = duration(self._clock() - t.started)
            self._print(task, t, f"stopped after {elapsed}" if stopped else f"done in {elapsed}")

    def close(self, *, stopped: bool) -> None:
        """Finish every task still running (``stopped``: the command failed or was interrupted)."""
        for task in list(self._tasks):
            self.finish(task, stopped=stopped)

    def _print(self, task: str, t: _LineTask, ending: str | None) -> None:
        line = progress_line({**t.progress.to_json(), **t.fields}, t.unit, ending)
        print(f"{task}: {line}", file=self._stream, flush=True)
        t.printed_step, t.printed_at = t.progress.step, self._clock()


class RichDisplay:
    """Progress as rich bars on ``console``, one per task, drawn only when ``console`` is a terminal;
    ``transient``: removed when done; ``redirect_stderr``: what is written to stderr meanwhile (the log)
    goes above the bars."""

    def __init__(self, console: Any, *, transient: bool = False, redirect_stderr: bool = False) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=console,
            transient=transient,
            redirect_stderr=redirect_stderr,
            disable=not console.is_terminal,
        )
        self._ids: dict[str, Any] = {}

    def update(self, task: str, step: int, total: int | None = None, /, *, unit: str = "step", **fields: Any) -> None:
        info = " · ".join([*([fields["phase"]] if fields.get("phase") else []), *describe_fields(fields),
                           *describe_usage(fields)])  # fmt: skip
        if task not in self._ids:
            self._progress.start()  # idempotent: the bars appear with the first update
            self._ids[task] = self._progress.add_task(task, total=total, info=info)
        self._progress.update(self._ids[task], completed=step, total=total, info=info)

    def finish(self, task: str) -> None:
        self._ids.pop(task, None)

    def close(self, *, stopped: bool) -> None:
        """Stop drawing (``stopped`` changes nothing: the bars show where it stopped)."""
        self._progress.stop()


class NoDisplay:
    """No progress at all (``run --once`` on a terminal, where the log is drawn instead)."""

    def update(self, task: str, step: int, total: int | None = None, /, *, unit: str = "step", **fields: Any) -> None:
        pass

    def finish(self, task: str) -> None:
        pass

    def close(self, *, stopped: bool) -> None:
        pass


@contextlib.contextmanager
def progress_display(
    console: Any = None, *, lines: bool = True, transient: bool = False, redirect_stderr: bool = False
) -> Iterator[ProgressDisplay]:
    """The display of a command's progress: :class:`LineDisplay` on stdout when ``lines`` (the command prints
    no JSON on stdout) and stdout is not a terminal; else a :class:`RichDisplay` on the rich ``console``
    (``transient``, ``redirect_stderr``: as there); else :class:`NoDisplay`. Tasks still running when the
    block ends get their last line."""
    display: LineDisplay | RichDisplay | NoDisplay
    if lines and not sys.stdout.isatty():
        display = LineDisplay(sys.stdout)
    elif console is not None:
        display = RichDisplay(console, transient=transient, redirect_stderr=redirect_stderr)
    else:
        display = NoDisplay()
    try:
        yield display
    except BaseException:
        display.close(stopped=True)
        raise
    display.close(stopped=False)
