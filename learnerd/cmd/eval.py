"""``learnerd eval DOC``: evaluate a document's adapter against its base, sway-style, and report.

Runs every probe (``probe_recall``, ``delta_kl``, ``multi_turn_coherence_decay``,
``section_internalization``, with ``null_adapter`` calibration) on the current adapter version of ``DOC``,
or ``--adapter vN``; writes the sway schema-1 report beside that version (``versions/vNNNN/eval.json``, the
file the daemon's evaluation reconciler also writes) and to ``--json PATH``, and prints a one-screen
summary. ``--history`` instead prints the probe pass rate and score of every evaluated version and plots
them into a PNG (``--plot PATH``; default ``<adapters>/<dlm_id>/eval-history.png``).

Exit status: 0 when the evaluation ran (whatever the verdicts), 1 when it could not (a missing or
malformed document, no adapter, an unusable base model or device).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a .dlm document's adapter (sway-compatible probes and report)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("doc", metavar="DOC", type=Path, help=".dlm document whose adapter to evaluate")
    p.add_argument("--adapter", metavar="vN", default="current", help="adapter version (default: current)")
    p.add_argument("--json", metavar="PATH", type=Path, help="also write the report here")
    p.add_argument("--null-runs", type=int, metavar="N", help="noise adapters to calibrate on (default: config)")
    p.add_argument("--history", action="store_true", help="show pass rate and score per version instead, and plot")
    p.add_argument("--plot", metavar="PNG", type=Path, help="where --history writes its plot")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (default: [evaluation] device)")
    add_common_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from rich.console import Console

    from learnerd.eval.history import adapter_key
    from learnerd.ml.base_model import BaseModelError
    from learnerd.store.adapters import AdapterStore, AdapterStoreError
    from learnerd.store.dlm import DocumentError, read_document

    cfg = load_config_from_args(args)
    console = Console(highlight=False)
    if args.null_runs is not None and not 0 <= args.null_runs <= 20:
        raise CommandError("--null-runs must be in 0..20")
    try:
        document = read_document(args.doc)
        store = AdapterStore(cfg.adapters_dir)
        key = adapter_key(document)
        if args.history:
            return _history(console, store, key, args)
        version = store.resolve(key, args.adapter)
    except DocumentError as exc:
        raise CommandError(str(exc)) from None
    except AdapterStoreError as exc:
        raise CommandError(f"{args.doc}: {exc}") from None
    except OSError as exc:
        raise CommandError(f"{args.doc}: {exc.strerror or exc}") from None

    from learnerd.eval.history import report_path
    from learnerd.eval.probes.base import EvalOptions
    from learnerd.eval.report import write_report
    from learnerd.eval.suite import evaluate_version
    from learnerd.eval.summary import render_report
    from learnerd.ml.base_model import resolve_base_model
    from learnerd.ml.device import DeviceError, resolve_device

    options = EvalOptions.from_settings(cfg.evaluation)
    if args.null_runs is not None:
        options = dataclasses.replace(options, null_runs=args.null_runs)
    try:
        placement = resolve_device(args.device or cfg.evaluation.device)
        base = resolve_base_model(
            document.frontmatter.base_model, cache_dir=cfg.models_dir, relative_to=args.doc.parent
        )
        report = evaluate_version(document, version, base, options=options, placement=placement)
    except (BaseModelError, DeviceError, DocumentError) as exc:
        raise CommandError(str(exc)) from None
    targets = [report_path(version), *([args.json] if args.json else [])]
    for target in targets:
        write_report(target, report)
    render_report(report, console, title=f"{args.doc} — adapter {version.name}")
    console.print("report: " + ", ".join(str(t) for t in targets), markup=False)
    return 0


def _history(console, store, key: str, args: argparse.Namespace) -> int:
    from learnerd.eval.history import history, plot_history
    from learnerd.eval.summary import render_history

    points = history(store, key)
    if not points:
        raise CommandError(f"{args.doc}: no evaluated adapter version yet (run learnerd eval {args.doc})")
    render_history(points, console, title=f"evaluation history of {args.doc}")
    plot = args.plot or store.doc_dir(key) / "eval-history.png"
    plot_history(points, plot, title=f"{args.doc.name}: probe pass rate per adapter version")
    console.print(f"plot: {plot}", markup=False)
    return 0
