"""``learnerd train DOC``: one training cycle of one .dlm document, then its evaluation and promotion gate, in
the foreground.

The cycle the daemon's training reconciler runs (``learnerd.reconcilers.training``): probes injected over
RPC and still pending in the journal are written into the document first, then the document's rows are
compared with its current adapter — nothing to train when they are unchanged, else a fresh or incremental
cycle in a child process, committed as the next adapter version under ``<state_dir>/adapters/<dlm_id>/``: a
candidate. Then, as the daemon's evaluation reconciler does, the candidate is evaluated and the promotion
gate decides (docs/evaluation.md, "The promotion gate"): promoted, it becomes the current version that
``learnerd generate``, ``learnerd eval`` and the served model use; rejected, it is kept with its report and
verdict and the current version stays. A candidate left undecided by an earlier, interrupted run is decided
the same way. Progress (steps, loss, time left; then the evaluation's steps) is a bar on stderr on a
terminal; when stdout is not a terminal it is lines on stdout instead (``learnerd.cmd._progress``). The
outcome and the verdict go to stdout (``--json``: one JSON object with a ``gate`` member, and no progress
lines).

Exit status: 0 after a promoted version or when there is nothing to train; 1 when the gate rejected the
candidate, when its evaluation failed (it is not promoted; the next run or the daemon evaluates it again),
for a missing or invalid document, an unknown base model, a device this machine lacks, a ``training`` block
learnerd cannot train, a failed training process, or a state directory held by a running daemon (which
trains its documents itself).
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
    from learnerd.reconcilers.evaluation import evaluation_reconciler
    from learnerd.reconcilers.training import DuplicateDocumentError, training_reconciler
    from learnerd.store.dlm import DocumentError, TrainingConfigError
    from learnerd.store.probe_journal import JournalError
    from learnerd.store.state_dir import UnsafeStateDir
    from learnerd.training.runner import TrainingFailed

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
        outcome = report.to_dict()
        if report.outcome.version is not None or _undecided(reconciler.store, report.doc_key):
            if not args.json:
                print(_describe(outcome), flush=True)
            gated = _gate(evaluation_reconciler(cfg), path, args.json)
            outcome["gate"] = _verdict(gated)
            print(json.dumps(outcome, indent=2) if args.json else _describe_gate(outcome["gate"]))
            return 0 if gated.verdict.promoted else 1
    finally:
        lock.release()
    print(json.dumps(outcome, indent=2) if args.json else _describe(outcome))
    return 0


def _undecided(store: Any, doc_key: str) -> bool:
    """The document has a candidate without a verdict (an earlier run was interrupted before deciding)."""
    candidate = store.candidate(doc_key)
    return candidate is not None and candidate.verdict() is None


def _gate(evaluation: Any, path: Path, as_json: bool) -> Any:
    """Evaluate the candidate and decide on it (:meth:`~learnerd.reconcilers.evaluation.EvaluationReconciler.gate`),
    showing the evaluation's steps; a failed evaluation is a :class:`CommandError` (nothing was promoted)."""
    import anyio

    from learnerd.ml.base_model import BaseModelError
    from learnerd.ml.device import DeviceError
    from learnerd.store.dlm import DocumentError

    try:
        gated = anyio.run(_evaluate, evaluation, path, as_json)
    except (BaseModelError, DeviceError, DocumentError) as exc:
        raise CommandError(str(exc)) from exc
    except Exception as exc:  # an evaluation that fails never promotes: say so and exit 1
        raise CommandError(
            f"{path}: the candidate's evaluation failed ({type(exc).__name__}: {exc}); it is not promoted "
            "(learnerd train or the daemon evaluates it again)"
        ) from exc
    assert gated is not None  # a candidate exists
    return gated


async def _evaluate(evaluation: Any, path: Path, as_json: bool) -> Any:
    import anyio
    import anyio.to_thread
    from rich.console import Console

    from learnerd.cmd._progress import progress_display

    task = f"evaluate {path.name}"
    with progress_display(Console(stderr=True), lines=not as_json) as display:
        async with anyio.create_task_group() as tg:

            async def show() -> None:
                while True:
                    for p in evaluation.progress().values():
                        display.update(task, p["step"], p["total"], version=p.get("version"))
                    await anyio.sleep(0.5)

            tg.start_soon(show)
            gated = await anyio.to_thread.run_sync(evaluation.gate, str(path))
            tg.cancel_scope.cancel()
    return gated


def _verdict(gated: Any) -> dict[str, Any]:
    """The gate's verdict as plain data (``gate`` of ``--json``)."""
    return {"version": gated.version.name, **gated.verdict.to_dict()}


def _describe_gate(g: dict[str, Any]) -> str:
    from learnerd.store.adapters import version_name

    lines = [f"{g['outcome']} {g['version']}" + (": now the current version" if g["outcome"] == "promoted" else "")]
    for check in g["checks"]:
        lines.append(f"  {check['name']}: {check['outcome']} — {check['detail']}")
    if g["outcome"] == "rejected":
        current = version_name(g["baseline"]) if g["baseline"] is not None else "none (the base model is served)"
        lines.append(f"  kept for inspection, never served; the current version stays {current}")
    return "\n".join(lines)


async def _cycle(reconciler: Any, path: Path, fresh: bool, as_json: bool) -> Any:
    """Run the cycle, showing its progress (:mod:`learnerd.cmd._progress`) from the start of its training
    process: a rich bar on stderr on a terminal, else lines on stdout (none with ``--json``)."""
    from rich.console import Console

    from learnerd.cmd._progress import progress_display
    from learnerd.cmd._render import USAGE_KEYS
    from learnerd.reconcilers.training import TRAINING_STEP

    task = f"train {path.name}"
    with progress_display(Console(stderr=True), lines=not as_json) as display:

        def usage() -> dict[str, Any]:  # the training process's CPU share and memory
            entry = reconciler.progress().get(str(path), {})
            return {k: entry[k] for k in USAGE_KEYS if k in entry}

        def on_progress(event: Any) -> None:
            loss = f"{event.loss:.4f}"
            step, total = event.step, event.total_steps
            display.update(task, step, total, phase=TRAINING_STEP, unit="step", loss=loss, **usage())

        def on_phase(event: Any) -> None:
            display.update(task, event.done, event.total, phase=event.phase, unit=event.unit, **usage())

        return await reconciler.run_cycle(
            path, fresh=fresh, on_start=lambda: display.update(task, 0), on_progress=on_progress, on_phase=on_phase
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
