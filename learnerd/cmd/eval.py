"""``learnerd eval DOC``: evaluate a document's adapter against its base, sway-style, and report.

Runs every probe (``probe_recall``, ``delta_kl``, ``multi_turn_coherence_decay``,
``section_internalization``, and the retention probes ``paraphrase_invariance``, ``calibration_drift`` and
``answer_retention``, with ``null_adapter`` calibration) on the current adapter version of ``DOC``,
or ``--adapter vN`` (the retention and dialogue probes scoring each item as ``[serve] routing`` serves it,
docs/evaluation.md), showing its progress (a bar on a terminal; lines on stdout when stdout is not a terminal
and ``--json`` is not given); writes the sway schema-1 report beside that
version (``versions/vNNNN/eval.json``, the file the daemon's evaluation reconciler also writes) and to
``--output PATH``, and prints a one-screen summary whose score line explains the band — or, with
``--json``, the report itself on stdout. ``--junit PATH`` also writes JUnit XML as sway does.
``--history`` instead prints the probe pass rate and score of every evaluated version, beside what became of
the answers that version served (suggested / accepted / edited / failed, docs/operations.md "Suggestions")
(``--json``: as a JSON list, with retention where measured) and plots them, with retention and each version's
training loss curve, into a PNG (``--plot PATH``; default ``<adapters>/<dlm_id>/eval-history.png``).

Exit status: 0 when the evaluation ran and passed its gates; 1 when it could not run (a missing or
malformed document, no adapter, an unusable base model or device), or when a gate failed:
``--fail-under SCORE`` (the overall score is below SCORE) or ``--require-pass`` (a probe failed or errored).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from learnerd.cmd._common import CommandError, add_common_options, document_store_errors, load_config_from_args, plain


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a .dlm document's adapter (sway-compatible probes and report)",
        description=plain(__doc__),
    )
    p.add_argument("doc", metavar="DOC", type=Path, help=".dlm document whose adapter to evaluate")
    p.add_argument("--adapter", metavar="vN", default="current", help="adapter version (default: current)")
    p.add_argument("--output", "-o", metavar="PATH", type=Path, help="also write the report here")
    p.add_argument("--json", action="store_true", help="print the report (or --history) as JSON on stdout")
    p.add_argument("--junit", metavar="PATH", type=Path, help="also write the report as JUnit XML (sway's layout)")
    p.add_argument("--fail-under", metavar="SCORE", type=float, help="exit 1 when the overall score is below SCORE")
    p.add_argument("--require-pass", action="store_true", help="exit 1 when a probe failed or errored")
    p.add_argument("--null-runs", type=int, metavar="N", help="noise adapters to calibrate on (default: config)")
    p.add_argument(
        "--calibration",
        choices=("sway", "sway-exact", "document"),
        help="null calibration: sway's sentinel prompts and noise order (default); sway-exact: also sway's "
        "top-k tail treatment (sway's numbers, not the exact divergence); or the document's prompts",
    )
    p.add_argument("--threads", type=int, metavar="N", help="torch threads (default: config; 0: the idle cores)")
    p.add_argument("--history", action="store_true", help="show pass rate and score per version instead, and plot")
    p.add_argument("--plot", metavar="PNG", type=Path, help="where --history writes its plot")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (default: [evaluation] device)")
    add_common_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from learnerd.eval.history import adapter_key
    from learnerd.fleet.ledger import adapter_store
    from learnerd.ml.base_model import BaseModelError
    from learnerd.store.dlm import DocumentError, read_document

    cfg = load_config_from_args(args)
    console = Console(highlight=False)
    errors = Console(stderr=True, highlight=False)
    if args.null_runs is not None and not 0 <= args.null_runs <= 20:
        raise CommandError("--null-runs must be in 0..20")
    if args.fail_under is not None and not 0.0 <= args.fail_under <= 1.0:
        raise CommandError("--fail-under must be in [0, 1]")
    if args.threads is not None and args.threads < 0:
        raise CommandError("--threads must be >= 0 (0: the idle cores)")
    with document_store_errors(args.doc):
        document = read_document(args.doc)
        store = adapter_store(cfg)
        key = adapter_key(document)
        if args.history:
            return _history(console, store, key, args, _suggestions(cfg, key))
        version = store.resolve(key, args.adapter)

    from learnerd.cmd._progress import progress_display
    from learnerd.eval.history import report_path
    from learnerd.eval.junit import write_junit
    from learnerd.eval.probes.base import EvalOptions
    from learnerd.eval.report import dump_report, write_report
    from learnerd.eval.suite import evaluate_version, total_steps
    from learnerd.eval.summary import render_report
    from learnerd.ml.base_model import resolve_base_model
    from learnerd.ml.device import DeviceError, resolve_device
    from learnerd.ml.embedders import EmbedderError, shared_embedder
    from learnerd.ml.loader import ModelCheckError
    from learnerd.ml.threads import set_torch_threads

    overrides = {"null_runs": args.null_runs, "calibration": args.calibration}
    options = EvalOptions.from_settings(cfg.evaluation, **{k: v for k, v in overrides.items() if v is not None})
    set_torch_threads(cfg.evaluation.num_threads if args.threads is None else args.threads)
    try:
        placement = resolve_device(args.device or cfg.evaluation.device)
        base = resolve_base_model(
            document.frontmatter.base_model, cache_dir=cfg.layout.models_dir, relative_to=args.doc.parent
        )
        with progress_display(errors, lines=not args.json, transient=True) as display:
            task, total, done = f"eval {args.doc.name}", total_steps(options), 0
            display.update(task, done, total, version=version.name)

            def advance(step: str) -> None:
                nonlocal done
                done += 1
                display.update(task, done, total, after=step)

            report = evaluate_version(
                document,
                version,
                base,
                options=options,
                progress=advance,
                placement=placement,
                answer_cache_dir=cfg.layout.models_dir,
                embedder=shared_embedder(cfg.embeddings) if cfg.serve.routing == "similarity" else None,
                rag_k=cfg.serve.rag_k,
                context_alpha=cfg.serve.served_context_alpha,
                choice_margin=cfg.serve.served_choice_margin,
            )
    except (BaseModelError, DeviceError, DocumentError, EmbedderError, ModelCheckError) as exc:
        raise CommandError(str(exc)) from None
    targets = [report_path(version), *([args.output] if args.output else [])]
    try:
        for target in targets:
            write_report(target, report)
        if args.junit:
            write_junit(args.junit, report)
    except OSError as exc:
        raise CommandError(f"cannot write the report: {exc}") from None
    written = ", ".join(str(t) for t in [*targets, *([args.junit] if args.junit else [])])
    if args.json:
        sys.stdout.write(dump_report(report))
        errors.print(f"report: {written}", markup=False)
    else:
        render_report(report, console, title=f"{args.doc} — adapter {version.name}")
        console.print(f"report: {written}", markup=False)
    return _gate(report, args, errors)


def _gate(report, args: argparse.Namespace, console) -> int:
    """1 when ``--fail-under`` or ``--require-pass`` fails (saying why on stderr), else 0."""
    from learnerd.eval.report import Verdict

    failures = []
    if args.fail_under is not None and report.score.overall < args.fail_under:
        failures.append(f"overall score {report.score.overall:.3f} < {args.fail_under:g}")
    if args.require_pass:
        bad = [p.name for p in report.probes if p.verdict in (Verdict.FAIL, Verdict.ERROR)]
        if bad:
            shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            failures.append(f"{len(bad)} probe(s) failed or errored: {shown}")
    for failure in failures:
        console.print(f"gate failed: {failure}", markup=False)
    return 1 if failures else 0


def _suggestions(cfg, key: str) -> dict[str, dict[str, int]]:
    """What became of the answers each version of ``key`` served: version → outcome → count
    (:func:`learnerd.store.suggestions.counts`); empty without a store, a warning on stderr when unreadable."""
    from learnerd.analyzer.ingest import STORE_ERRORS
    from learnerd.store import db
    from learnerd.store.suggestions import counts

    target = cfg.layout.store_target
    if not db.is_postgres(target) and not Path(target).exists():
        return {}
    try:
        conn = db.connect(target, readonly=True)
        try:
            return counts(conn, key).get(key, {})
        finally:
            conn.close()
    except (db.StoreUnavailable, db.SchemaError, *STORE_ERRORS) as exc:
        print(f"warning: suggestion counts unreadable: {exc}", file=sys.stderr)
        return {}


def _history(console, store, key: str, args: argparse.Namespace, suggestions: dict[str, dict[str, int]]) -> int:
    from learnerd.eval.history import history, plot_history
    from learnerd.eval.summary import render_history
    from learnerd.eval.versions import loss_curves

    points = history(store, key)
    if not points:
        raise CommandError(f"{args.doc}: no evaluated adapter version yet (run learnerd eval {args.doc})")
    plot = args.plot or store.doc_dir(key) / "eval-history.png"
    plot_history(
        points, plot, title=f"{args.doc.name}: probe pass rate per adapter version", losses=loss_curves(store, key)
    )
    if args.json:
        rows = [{**vars(p), "pass_rate": p.pass_rate, "suggestions": suggestions.get(p.name)} for p in points]
        sys.stdout.write(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        print(f"plot: {plot}", file=sys.stderr)
        return 0
    render_history(points, console, title=f"evaluation history of {args.doc}", suggestions=suggestions)
    console.print(f"plot: {plot}", markup=False)
    return 0
