"""``learnerd train DOC``: one training cycle of one .dlm document, in the foreground.

The cycle the daemon's training reconciler runs (``learnerd.reconcilers.training``): probes injected over
RPC and still pending in the journal are written into the document first, then the document's rows are
compared with its current adapter — nothing to train when they are unchanged, else a fresh or incremental
cycle in a child process, committed as the next adapter version under ``<state_dir>/adapters/<dlm_id>/``.
Progress (steps, loss, time left) is a bar on stderr on a terminal; when stdout is not a terminal it is
lines on stdout instead (``learnerd.cmd._progress``). The outcome goes to stdout (``--json``: one JSON
object, and no progress lines).

Exit status: 0 after a committed version or when there is nothing to train; 1 for a missing or invalid
document, an unknown base model, a device this machine lacks, a ``training`` block learnerd cannot train,
a failed training process, or a state directory held by a running daemon (which trains its documents itself).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args, plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="run one training cycle of a .dlm document in the foreground", description=plain(__doc__)
    )
    p.add_argument("document", metavar="DOC", help="the .dlm document")
    p.add_argument("--fresh", action="store_true", help="train a new adapter on every row (no incremental resume)")
    p.add_argument("--threads", type=int, metavar="N", help="torch threads for training (overrides the config)")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides [training] device)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_common_options(p)
    p.set_defaults(func=train, log_level="warning")


def train(args: argparse.Namespace) -> int:
    import anyio

    from learnerd.daemon.statelock import StateDirBusy, StateLock
    from learnerd.ml.base_model import BaseModelError
    from learnerd.ml.device import DeviceError
    from learnerd.ml.train_runner import TrainingFailed
    from learnerd.reconcilers.training import DuplicateDocumentError, training_reconciler
    from learnerd.store.dlm import DocumentError, TrainingConfigError
    from learnerd.store.probe_journal import JournalError
    from learnerd.store.state_dir import UnsafeStateDir

    cfg = load_config_from_args(args)
    if args.threads is not None:
        if args.threads < 1:
            raise CommandError("--threads must be >= 1", exit_code=2)
        cfg.training.num_threads = args.threads
    if args.device is not None:
        cfg.training.device = args.device
    cfg.training.niceness = 0  # in the foreground, someone is waiting for it: no need to yield the CPU
    path = Path(args.document).expanduser().resolve()
    lock = StateLock(cfg.state_dir)
    try:
        lock.acquire()
    except (StateDirBusy, UnsafeStateDir) as exc:
        raise CommandError(f"{exc} (a running daemon trains its documents itself)") from exc
    try:
        try:
            reconciler = training_reconciler(cfg)
        except JournalError as exc:
            raise CommandError(str(exc)) from exc
        journal = reconciler.journal
        assert journal is not None
        try:
            report = anyio.run(_cycle, reconciler, path, args.fresh, args.json)
        except FileNotFoundError as exc:
            raise CommandError(f"{path}: no such document") from exc
        except (DocumentError, BaseModelError, DeviceError, TrainingConfigError, DuplicateDocumentError) as exc:
            raise CommandError(str(exc)) from exc
        except TrainingFailed as exc:
            raise CommandError(f"{path}: training failed: {exc}") from exc
        finally:
            journal.close()
    finally:
        lock.release()
    outcome = report.to_dict()
    if args.json:
        print(json.dumps(outcome, indent=2))
    else:
        print(_describe(outcome))
    return 0


async def _cycle(reconciler: Any, path: Path, fresh: bool, as_json: bool) -> Any:
    """Run the cycle, showing its progress (:mod:`learnerd.cmd._progress`) from the start of its training
    process: a rich bar on stderr on a terminal, else lines on stdout (none with ``--json``)."""
    from rich.console import Console

    from learnerd.cmd._progress import progress_display

    task = f"train {path.name}"
    with progress_display(Console(stderr=True), lines=not as_json) as display:

        def on_progress(event: Any) -> None:
            display.update(task, event.step, event.total_steps, loss=f"{event.loss:.4f}")

        return await reconciler.run_cycle(
            path, fresh=fresh, on_start=lambda: display.update(task, 0), on_progress=on_progress
        )


def _describe(o: dict[str, Any]) -> str:
    probes = f"; {o['probes_written']} injected probe(s) written into the document" if o["probes_written"] else ""
    if o["outcome"] != "committed":
        return f"nothing to train: {o['reason']}{probes}"
    return (
        f"trained {o['version']} of {o['path']} ({o['mode']}: {o['reason']})\n"
        f"  {o['steps']} steps on {o['rows']} rows, loss {o['start_loss']:.4f} -> {o['final_loss']:.4f} nats/token\n"
        f"  Q/A pairs: {o['new_pairs']} new, {o['replayed_pairs']} replayed; sections: {o['new_sections']} new, "
        f"{o['replayed_sections']} replayed, {o['removed_sections']} removed"
        f"{probes}\n"
        f"  adapter: {o['adapter_path']} ({o['duration_s']:.1f} s)\n"
        f"  what it learned: learnerd versions {o['path']} {o['version']}"
    )
