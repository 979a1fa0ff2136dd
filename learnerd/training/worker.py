"""The training child process: ``python -m learnerd.training.worker``.

Protocol (one JSON object per line, UTF-8):

* **stdin**: the :class:`TrainingRequest` (one line). The worker then keeps reading stdin; end of file
  means the parent is gone, and the worker exits at once (``os._exit(3)``) rather than train for nobody.
* **stdout**: ``{"event": "ready"}`` once torch, transformers and peft are imported (before the request
  is read, so a spare worker started ahead of need does its imports while it waits);
  ``{"event": "phase", ...PhaseEvent}`` as it loads the base, generates the base's answers (``base answers``,
  general replay) and scores the start and final losses (``start loss``, ``final loss``);
  ``{"event": "progress", ...ProgressEvent}`` after every optimizer step, then exactly one of
  ``{"event": "result", ...TrainingResult}`` (exit status 0; the adapter is saved in ``output_dir``)
  or ``{"event": "error", "type": ..., "message": ..., "permanent": bool}`` (exit status 1).
  ``permanent`` marks bad input (an unusable base model or row) that retrying cannot fix. After that last
  event the worker flushes its streams and ends with ``os._exit``: the interpreter's teardown of torch,
  transformers and peft (about 2 CPU-seconds, which the parent would wait for) is skipped; the adapter files
  are already closed, and the parent fsyncs them when it commits.
  Anything else the libraries print goes to stderr: the worker moves the original stdout to a private
  descriptor before importing them and points fd 1 at stderr.
* **signals**: SIGTERM / SIGKILL end it with no cleanup; the parent removes ``output_dir``.
* **the parent's death**: on Linux the worker first asks the kernel for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``, prctl(2)), then checks that the parent named in ``$LEARNERD_PARENT_PID``
  is still its parent (it may have died before the request took effect): so it never outlives a
  ``kill -9`` of the daemon, even while busy in a long torch call or stopped. Elsewhere, stdin's end of
  file (above) is the only signal.

Runs :func:`learnerd.training.lora.train_lora` on the base model directory, single-threaded Python, torch on
``num_threads`` intra-op threads when given, else on the cores free now, measured again every 30 s of steps
(:class:`learnerd.ml.threads.ThreadGovernor`; the count is written to stderr when it changes). The result's
``peak_rss_mb`` is the process's peak resident memory (``getrusage``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from learnerd.ml.rows import TrainingRow
from learnerd.store.dlm import TrainingConfig
from learnerd.training import ingredients
from learnerd.training.checkpoint import DEFAULT_EVERY_S, TrainingCheckpoint, fingerprint
from learnerd.training.config import check_trainable, training_config
from learnerd.training.ingredients.spec import CycleRows

PARENT_GONE_EXIT_STATUS = 3


@dataclass(frozen=True)
class TrainingRequest:
    """Everything the worker needs; JSON round-trips through :meth:`to_json` / :meth:`from_json`.

    ``base_model_path``: a Hugging Face model directory (resolved by ``learnerd.ml.base_model``);
    ``output_dir``: an existing, empty directory for the adapter; ``resume_from``: a saved adapter
    directory to continue training, or None; ``num_threads``: torch intra-op threads (None: the free cores,
    :mod:`learnerd.ml.threads`);
    ``niceness``: added to the worker's nice value before it trains (``os.nice``; 0: unchanged), so that
    a daemon's event loop keeps its CPU while the worker trains; ``device``: where to train
    (``auto``, ``cpu``, ``cuda``, ``cuda:N``; :func:`learnerd.ml.device.resolve_device`); ``rehearsal``: the
    unchanged rows an incremental cycle rehearses, ``rehearsal_per_epoch`` of them each epoch
    (:func:`learnerd.training.lora.train_lora`); ``replay_cache``: where the base's general replay answers are
    cached (:func:`learnerd.training.ingredients.replay.cache_path`; None: not cached); ``checkpoint_dir``: where the
    training saves its state every ``checkpoint_every_s`` seconds and whence a request for the same training goes
    on (:mod:`learnerd.training.checkpoint`; None: no checkpoints).
    """

    base_model_path: str
    output_dir: str
    rows: tuple[TrainingRow, ...]
    config: TrainingConfig = field(default_factory=lambda: training_config()())
    resume_from: str | None = None
    num_threads: int | None = None
    niceness: int = 0
    device: str = "cpu"
    replay_cache: str | None = None
    rehearsal: tuple[TrainingRow, ...] = ()
    rehearsal_per_epoch: int = 0
    checkpoint_dir: str | None = None
    checkpoint_every_s: float = DEFAULT_EVERY_S

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_model_path": self.base_model_path,
            "output_dir": self.output_dir,
            "rows": [r.to_dict() for r in self.rows],
            "config": self.config.to_dict(),
            "resume_from": self.resume_from,
            "num_threads": self.num_threads,
            "niceness": self.niceness,
            "device": self.device,
            "replay_cache": self.replay_cache,
            "rehearsal": [r.to_dict() for r in self.rehearsal],
            "rehearsal_per_epoch": self.rehearsal_per_epoch,
            "checkpoint_dir": self.checkpoint_dir,
            "checkpoint_every_s": self.checkpoint_every_s,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def checkpoint(self) -> TrainingCheckpoint | None:
        """Its :class:`~learnerd.training.checkpoint.TrainingCheckpoint` (None without ``checkpoint_dir``): the
        fingerprint covers every field but where the adapter and checkpoint go, and the process's threads and
        niceness — what decides the adapter."""
        if self.checkpoint_dir is None:
            return None
        skipped = ("output_dir", "num_threads", "niceness", "checkpoint_dir", "checkpoint_every_s")
        decides = {k: v for k, v in self.to_dict().items() if k not in skipped}
        return TrainingCheckpoint(Path(self.checkpoint_dir), fingerprint(decides), self.checkpoint_every_s)

    @classmethod
    def from_json(cls, line: str) -> TrainingRequest:
        raw = json.loads(line)
        return cls(
            base_model_path=raw["base_model_path"],
            output_dir=raw["output_dir"],
            rows=tuple(TrainingRow.from_dict(r) for r in raw["rows"]),
            config=training_config().from_mapping(raw["config"]),
            resume_from=raw.get("resume_from"),
            num_threads=raw.get("num_threads"),
            niceness=raw.get("niceness", 0),
            device=raw.get("device", "cpu"),
            replay_cache=raw.get("replay_cache"),
            rehearsal=tuple(TrainingRow.from_dict(r) for r in raw.get("rehearsal", ())),
            rehearsal_per_epoch=raw.get("rehearsal_per_epoch", 0),
            checkpoint_dir=raw.get("checkpoint_dir"),
            checkpoint_every_s=raw.get("checkpoint_every_s", DEFAULT_EVERY_S),
        )


def run(request: TrainingRequest, emit: Any) -> dict[str, Any]:
    """Train as ``request`` says, calling ``emit(event_dict)`` for each progress event; return the
    result event. Raises whatever loading or training raises."""
    from transformers.utils import logging as hf_logging

    from learnerd.ml.base_model import load_model_directory
    from learnerd.ml.device import resolve_device
    from learnerd.ml.threads import ThreadGovernor
    from learnerd.training.lora import PhaseEvent, train_lora

    hf_logging.disable_progress_bar()
    if request.niceness:
        os.nice(request.niceness)
    governor = ThreadGovernor(request.num_threads or 0)
    print(f"torch threads: {governor.threads}", file=sys.stderr, flush=True)

    def retune() -> None:  # after every event: the count follows the free cores (every 30 s at most)
        before = governor.threads
        if governor.tick() != before:
            print(f"torch threads: {governor.threads}", file=sys.stderr, flush=True)

    def phase(event: PhaseEvent) -> None:
        emit({"event": "phase", **dataclasses.asdict(event)})
        retune()

    def stepped(event: Any) -> None:
        emit({"event": "progress", **dataclasses.asdict(event)})
        retune()

    phase(PhaseEvent("loading base", unit="model"))
    model, tokenizer = load_model_directory(request.base_model_path, placement=resolve_device(request.device))
    rows = retention_rows(
        model,
        tokenizer,
        request,
        on_answers=lambda done, total: phase(PhaseEvent("base answers", done, total, "answer")),
    )
    peft_model, result = train_lora(
        model,
        tokenizer,
        rows.every_epoch,
        request.config,
        resume_from=request.resume_from,
        on_progress=stepped,
        rehearsal=rows.rehearsal,
        rehearsal_per_epoch=rows.rehearsal_per_epoch,
        checkpoint=request.checkpoint(),
        on_phase=phase,
    )
    peft_model.save_pretrained(request.output_dir)
    return {"event": "result", **dataclasses.replace(result, peak_rss_mb=peak_rss_mb()).to_dict()}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (``getrusage``; Linux counts KiB, macOS bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


class RetentionRows(NamedTuple):
    """What a cycle trains: ``every_epoch`` rows, and ``rehearsal`` rows of which each epoch trains the next
    ``rehearsal_per_epoch`` (:func:`learnerd.training.lora.train_lora`; 0 when there is nothing to rehearse)."""

    every_epoch: list[TrainingRow]
    rehearsal: list[TrainingRow]
    rehearsal_per_epoch: int


def retention_rows(
    model: Any, tokenizer: Any, request: TrainingRequest, on_answers: Callable[[int, int], None] | None = None
) -> RetentionRows:
    """The rows every epoch trains and the rehearsal rows: ``request``'s document rows, then each ingredient's rows,
    in the order of :data:`~learnerd.training.ingredients.INGREDIENTS` (``model`` is still the base). The share
    rehearsed an epoch is ``min(rehearsal_per_epoch, len(request.rehearsal))`` document rows and the rehearsed rows
    they bring (``share × len(rehearsal) / len(request.rehearsal)``, rounded): a rehearsed pair costs an epoch what
    a new one does. ``on_answers(done, total)``: as the base's answers are generated (general replay).

    Raises:
        RowEncodingError: the tokenizer has no chat template (an ingredient generated with it).
        TrainingConfigError: ``request.config`` asks for what learnerd cannot train.
    """
    config = check_trainable(request.config)
    share = min(max(request.rehearsal_per_epoch, 0), len(request.rehearsal))
    cache = Path(request.replay_cache) if request.replay_cache else None
    cycle = CycleRows(request.rows, request.rehearsal, share, config.seed, model, tokenizer, cache, on_answers)
    every_epoch, rehearsal = list(request.rows), list(request.rehearsal)
    for ingredient in ingredients.INGREDIENTS:
        if ingredient.rows is not None:
            added = ingredient.rows(ingredient.options.of(config), cycle)
            every_epoch += added.every_epoch
            rehearsal += added.rehearsal
    per_epoch = round(share * len(rehearsal) / len(request.rehearsal)) if share else 0
    return RetentionRows(every_epoch, rehearsal, per_epoch)


def main() -> int:
    _die_with_parent()
    protocol = _private_stdout()

    def emit(event: dict[str, Any]) -> None:
        protocol.write(json.dumps(event) + "\n")
        protocol.flush()

    _preload()
    emit({"event": "ready"})
    line = sys.stdin.readline()
    if not line:
        return PARENT_GONE_EXIT_STATUS
    threading.Thread(target=_exit_when_parent_gone, daemon=True, name="parent-watch").start()
    try:
        emit(run(TrainingRequest.from_json(line), emit))
    except Exception as exc:
        emit({"event": "error", "type": type(exc).__name__, "message": str(exc), "permanent": _is_permanent(exc)})
        return 1
    return 0


PARENT_PID_ENV = "LEARNERD_PARENT_PID"
"""The pid of the process that started the worker (set by :mod:`learnerd.training.runner`)."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    expected = os.environ.get(PARENT_PID_ENV)
    if expected is not None and os.getppid() != int(expected):
        os._exit(PARENT_GONE_EXIT_STATUS)


def _preload() -> None:
    """Import what training needs (the seconds of a worker's start-up), quietly."""
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def _is_permanent(exc: Exception) -> bool:
    from learnerd.ml.base_model import BaseModelError
    from learnerd.ml.device import DeviceError
    from learnerd.ml.rows import RowEncodingError
    from learnerd.store.dlm import TrainingConfigError

    return isinstance(exc, BaseModelError | DeviceError | RowEncodingError | TrainingConfigError)


def _private_stdout() -> IO[str]:
    """Keep the real stdout for the protocol; send everything else written to fd 1 to stderr."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def _exit_when_parent_gone() -> None:
    while sys.stdin.readline():
        pass
    os._exit(PARENT_GONE_EXIT_STATUS)


def _exit_now(status: int) -> None:
    """Flush stdout and stderr and end the process with ``status`` without the interpreter's teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit_now(main())
