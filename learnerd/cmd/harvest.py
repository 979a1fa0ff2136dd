"""``learnerd harvest DOC --sway-json REPORT``: write a sway report's failing probes back into a .dlm document.

Flags, refusals and exit codes follow dlm's ``dlm harvest`` (``docs/cli/reference.md``): dry-run unless
``--apply``; ``--revert`` strips every auto-harvested section instead; ``--lax`` (the documented default)
skips failing probes without a reference, ``--strict`` refuses them. A report is read as dlm reads it
(``schema_version`` and ``probes`` are all it needs). ``--tag`` and ``--min-confidence`` default to
``[evaluation] harvest_tag`` / ``min_confidence`` of the config file. Exit 0 on success, 1 for a missing
or malformed report or document, ``--revert`` with ``--sway-json`` or ``--apply``, or ``--strict`` meeting a
failing probe without a reference; 2 when there is no candidate to add. The work is done by
:mod:`learnerd.eval.harvest`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "harvest",
        help="write a sway report's failing probes into a .dlm document as !probe sections",
        description="Write a sway report's failing probes back into a .dlm document as !probe sections "
        "(dry-run unless --apply), as `dlm harvest` does.",
    )
    p.add_argument("doc", metavar="DOC", type=Path, help=".dlm document to harvest into")
    p.add_argument("--sway-json", metavar="REPORT", type=Path, help="sway report (schema_version 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--apply", action="store_true", help="write the sections (default: dry-run)")
    mode.add_argument("--dry-run", action="store_true", help="print what would change, write nothing (default)")
    p.add_argument("--revert", action="store_true", help="strip every auto-harvested section; keeps hand-written ones")
    p.add_argument(
        "--tag", help='marker source prefix: source="TAG/<probe>" (default: [evaluation] harvest_tag, auto-harvest)'
    )
    p.add_argument(
        "--min-confidence",
        type=_unit_interval,
        metavar="F",
        help="skip candidates below F in [0, 1] (default: [evaluation] min_confidence, 0)",
    )
    p.add_argument(
        "--reinforce",
        action="store_true",
        help="a failing probe the document already has gets one plain ### Q copy (trained again) instead of a skip",
    )
    strictness = p.add_mutually_exclusive_group()
    strictness.add_argument(
        "--strict", dest="strict", action="store_true", help="refuse failing probes without a reference"
    )
    strictness.add_argument("--lax", dest="strict", action="store_false", help="skip them and say so (default)")
    p.add_argument("--json", action="store_true", help="print the plan (or what --revert strips) as JSON")
    add_common_options(p)
    p.set_defaults(func=run, strict=False, log_level="warning")


def _unit_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], not {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from learnerd.eval.harvest import HarvestError, auto_harvest, load_harvest_report, revert_harvest
    from learnerd.store.dlm import DocumentError

    cfg = load_config_from_args(args)
    out = Console(highlight=False, soft_wrap=True)
    if args.revert and (args.sway_json is not None or args.apply):
        raise CommandError("--revert cannot be combined with --sway-json or --apply")
    if not args.revert and args.sway_json is None:
        raise CommandError("--sway-json REPORT is required (or --revert to strip auto-harvested sections)")
    try:
        if args.revert:
            removed = revert_harvest(args.doc, apply=not args.dry_run)
            if args.json:
                _print_json(
                    {
                        "document": str(args.doc),
                        "written": not args.dry_run and bool(removed),
                        "removed": [_section_json(s) for s in removed],
                    }
                )
                return 0
            verb = "would strip" if args.dry_run else "stripped"
            out.print(f"{verb} {len(removed)} auto-harvested section(s) from {args.doc}")
            for s in removed:
                out.print(f"  - {s.section_id}  source={s.harvest_source}  {_clip(s.summary)}")
            return 0
        report = load_harvest_report(args.sway_json)
        result = auto_harvest(
            args.doc,
            report,
            tag=args.tag if args.tag is not None else cfg.evaluation.harvest_tag,
            min_confidence=args.min_confidence if args.min_confidence is not None else cfg.evaluation.min_confidence,
            strict=args.strict,
            reinforce=args.reinforce,
            apply=args.apply,
        )
    except (DocumentError, HarvestError) as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"{args.doc}: {exc.strerror or exc}") from None

    nothing = not result.plan.additions and not result.removed
    if args.json:
        _print_json(_result_json(result, args.doc, report.ignored))
        return 2 if nothing else 0
    for i in report.ignored:
        out.print(f"probes[{i}] is not an object: ignored")
    _render(out, result.plan, doc=args.doc)
    for s in result.removed:
        verb = "removed" if result.written else "would remove"
        out.print(f"{verb} orphaned reinforcement copy {s.section_id} (source={s.harvest_source}): its probe is gone")
    if nothing:
        out.print("no candidates to harvest: no failing probe with a reference, or all are already in the document")
        return 2
    if result.written:
        also = f", removed {len(result.removed)}" if result.removed else ""
        out.print(f"wrote {len(result.plan.additions)} section(s) to {args.doc}{also}")
        return 0
    out.print("the sections, as they would be appended:")
    for addition in result.plan.additions:
        out.print("\n".join(addition.section.lines()), markup=False, highlight=False)
    out.print("dry-run: nothing written; re-run with --apply to write")
    return 0


def _print_json(data: dict) -> None:
    import json

    print(json.dumps(data, indent=2, ensure_ascii=False))


def _section_json(section) -> dict:
    return {"section_id": section.section_id, "source": section.harvest_source, "summary": section.summary}


def _result_json(result, doc: Path, ignored: tuple[int, ...]) -> dict:
    """``--json``: the plan, what was removed, and whether the document was written."""
    plan = result.plan

    def candidate(c) -> dict:
        return {
            "probe": c.probe_name,
            "kind": c.probe_kind,
            "field": c.origin,
            "prompt": c.prompt,
            "reference": c.reference,
            "confidence": c.confidence,
        }

    return {
        "document": str(doc),
        "written": result.written,
        "additions": [
            {**candidate(a.candidate), "section_id": a.section.section_id, "reinforcement": a.reinforcement}
            for a in plan.additions
        ],
        "skipped": [{**candidate(s.candidate), "reason": s.reason.value, "detail": s.detail} for s in plan.skipped],
        "undertrained": [
            {"probe": u.probe_name, "section_id": u.section_id, "in_document": u.section is not None}
            for u in plan.undertrained
        ],
        "unharvestable": [{"probe": u.name, "kind": u.kind, "reason": u.reason} for u in plan.unharvestable],
        "removed": [_section_json(s) for s in result.removed],
        "ignored_probes": list(ignored),
    }


def _render(out, plan, *, doc: Path) -> None:
    from rich.table import Table

    out.print(f"harvest plan for {doc}: {len(plan.additions)} to add, {len(plan.skipped)} skipped")
    if plan.additions:
        t = Table(title="sections to add", title_justify="left")
        for col in ("from probe", "report field", "section id", "Q", "A"):
            t.add_column(col, no_wrap=col == "section id", overflow="fold")
        for a in plan.additions:
            c = a.candidate
            t.add_row(
                f"{c.probe_name} ({c.probe_kind})",
                c.origin + (" (reinforcement copy)" if a.reinforcement else ""),
                a.section.section_id,
                _clip(c.prompt),
                _clip(c.reference),
            )
        out.print(t)
    if plan.skipped:
        t = Table(title="skipped", title_justify="left")
        for col in ("from probe", "report field", "reason", "detail"):
            t.add_column(col, overflow="fold")
        for s in plan.skipped:
            t.add_row(s.candidate.probe_name, s.candidate.origin, s.reason.value, s.detail)
        out.print(t)
    if plan.undertrained:
        t = Table(
            title="sections the adapter did not learn (need more training, not a new section)", title_justify="left"
        )
        for col in ("from probe", "section id", "type", "first line"):
            t.add_column(col, no_wrap=col == "section id", overflow="fold")
        for u in plan.undertrained:
            if u.section is None:
                t.add_row(u.probe_name, u.section_id, "-", "(not in this document)")
            else:
                t.add_row(u.probe_name, u.section_id, u.section.type, _clip(u.section.summary))
        out.print(t)
    for u in plan.unharvestable:
        out.print(f"failing probe {u.name} ({u.kind}): nothing to harvest ({u.reason})")


def _clip(text: str, limit: int = 60) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"
