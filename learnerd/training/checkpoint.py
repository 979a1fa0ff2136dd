"""Training checkpoints: a cycle that stops part-way (a restart, a crash, a drain, a power cut) goes on from its
last checkpoint when the same training is asked for again, instead of from its first step.

:func:`learnerd.training.lora.train_lora` saves one every ``every_s`` seconds of training (never after the last
step): the adapter's trainable parameters, the AdamW and schedule states, torch's CPU generator, the step, the
counters, the start loss and the progress events so far. Resumed, it loads them, skips the micro-batches the saved
steps drew and re-emits the saved events; on CPU, with the same torch thread count, the adapter is the
uninterrupted run's, bit for bit.

One file, ``<directory>/checkpoint.pt`` (``torch.save``; read with ``torch.load(weights_only=True)``; written
atomically). It holds the ``fingerprint`` of its training — a SHA-256 over everything that decides the adapter —
so another training's checkpoint is never resumed: it is logged (``training.checkpoint_other``) and removed (its
weights may hold rows the document no longer has). One that cannot be read is logged
(``training.checkpoint_unreadable``) and training starts at step 1; one that cannot be written is logged and
skipped. The caller removes the directory once the version is committed (:func:`learnerd.training.cycle.train_cycle`).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.store.atomic import write_cache_file

log = structlog.get_logger(__name__)

CHECKPOINT_VERSION = 1
"""Bumped whenever a checkpoint's contents change meaning: an older one is then another fingerprint."""
FILE = "checkpoint.pt"
CHECKPOINT_DIR = "training-checkpoint"
"""The directory, in a document's adapter directory, of its training's checkpoint (:mod:`learnerd.training.cycle`)."""
DEFAULT_EVERY_S = 600.0
"""Seconds of training between two checkpoints (each is the adapter and twice its size in optimizer state:
about 30 MB on SmolLM2-135M at the recipe's rank)."""


def fingerprint(decides: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of :data:`CHECKPOINT_VERSION` and ``decides`` (JSON-serialisable: what makes the
    adapter what it is)."""
    raw = json.dumps([CHECKPOINT_VERSION, decides], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class TrainingCheckpoint:
    """Where one training run's checkpoint lives (``directory``, created on the first save, mode 0700), whose
    training it belongs to (``fingerprint``), and how often it is saved (``every_s``, seconds of training;
    0: after every step)."""

    directory: Path
    fingerprint: str
    every_s: float = DEFAULT_EVERY_S

    @property
    def path(self) -> Path:
        """The checkpoint file."""
        return self.directory / FILE

    def load(self) -> dict[str, Any] | None:
        """The saved state (the dict :meth:`save` was given); None when there is none, when it is another
        training's (logged, and removed: weights of rows the document no longer has are not kept), or when it
        cannot be read (logged)."""
        import torch

        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("training.checkpoint_unreadable", path=str(self.path), error=str(exc))
            return None
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or "fingerprint" not in state or "step" not in state:
                raise ValueError("not a training checkpoint")
        except Exception as exc:  # torch.load raises what its unpickler meets: any of them is an unreadable file
            log.warning("training.checkpoint_unreadable", path=str(self.path), error=f"{type(exc).__name__}: {exc}")
            return None
        if state["fingerprint"] != self.fingerprint:  # the document's rows or recipe changed: never resumed
            log.info("training.checkpoint_other", path=str(self.path), step=int(state["step"]))
            self.clear()
            return None
        return state

    def save(self, state: Mapping[str, Any]) -> None:
        """Write ``state`` (tensors and plain values; ``step`` among them) with this fingerprint, atomically;
        skipped (logged as ``training.checkpoint_unwritable``) when it cannot be written."""
        import torch

        buffer = io.BytesIO()
        torch.save({**state, "fingerprint": self.fingerprint}, buffer)
        write_cache_file(self.path, buffer.getvalue(), "training.checkpoint_unwritable")

    def clear(self) -> None:
        """:func:`remove_checkpoint` of its directory."""
        remove_checkpoint(self.directory)


def remove_checkpoint(directory: Path) -> None:
    """Remove a checkpoint ``directory`` (nothing to go on from any more); a missing one is fine."""
    shutil.rmtree(directory, ignore_errors=True)
