"""``learnerd versions DOC [vN]``: what each adapter version of a document learned, and how it did.

Without ``vN``: one row per version — when it was trained, fresh or incremental, steps, final loss, the
sections (and learned examples) added, removed and replayed against the version before, its evaluation
score, retention where it was measured (``answer_retention``: the base's right answers kept;
``calibration_drift``: items regressed) and whether it is served, or was promoted or rejected by the promotion
gate (and why).
With ``vN``: the examples that version added and removed, each with the log file, line and time its command
came from, and the sections it replayed. Read from the files beside each adapter (``manifest.json``,
``metadata.json``, ``eval.json``, ``verdict.json``); no daemon needed. ``--json`` prints the same as JSON.

Exit status: 0; 1 for a missing or malformed document, a version that does not exist, or an unreachable store.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import add_common_options, document_store_errors, load_config_from_args, plain

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "versions", help="what each adapter version of a document learned and how it scored", description=plain(__doc__)
    )
    p.add_argument("doc", metavar="DOC", type=Path, help="the .dlm document")
    p.add_argument("version", metavar="vN", nargs="?", help="list the examples this version added and removed")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_common_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from learnerd.eval.history import adapter_key
    from learnerd.eval.versions import version_changes, version_rows
    from learnerd.fleet.ledger import adapter_store
    from learnerd.store.dlm import read_document

    cfg = load_config_from_args(args)
    with document_store_errors(args.doc):
        key = adapter_key(read_document(args.doc))
        store = adapter_store(cfg)
        if args.version is not None:
            changes = version_changes(store, key, args.version)
            _print_changes(changes.to_dict(), args.doc, args.json)
            return 0
        rows = [r.to_dict() for r in version_rows(store, key)]
    if args.json:
        json.dump(rows, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    if not rows:
        print(f"{args.doc}: no adapter version yet (learnerd train {args.doc}, or a running daemon, trains one)")
        return 0
    _print_rows(rows, args.doc)
    return 0


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def _print_rows(rows: list[dict[str, Any]], doc: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"adapter versions of {doc}")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("version", "left"),
        ("trained (UTC)", "left"),
        ("mode", "left"),
        ("steps", "right"),
        ("loss", "right"),
        ("added", "right"),
        ("removed", "right"),
        ("replayed", "right"),
        ("score", "right"),
        ("retention", "left"),
        ("status", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for r in rows:
        retention = r["retention"]
        kept, drift = retention.get("answer_retention"), retention.get("calibration_drift")
        shown = [f"kept {kept:.0%}" if kept is not None else "", f"drift {drift:.0%}" if drift is not None else ""]
        added = _count(r["added"]) + (f" ({r['examples_added']} ex.)" if r["examples_added"] else "")
        removed = _count(r["removed"]) + (f" ({r['examples_removed']} ex.)" if r["examples_removed"] else "")
        table.add_row(
            r["name"],
            r["created_at"].replace("+00:00", "").replace("T", " "),
            r["mode"],
            str(r["steps"]),
            f"{r['final_loss']:.4f}",
            added,
            removed,
            _count(r["replayed"]),
            f"{r['score']:.3f}" if r["score"] is not None else "—",
            " · ".join(s for s in shown if s) or "—",
            r["status"] + (f": {r['reason']}" if r["reason"] else ""),
        )
    Console(highlight=False, width=None if sys.stdout.isatty() else 160).print(table)
    print("added / removed / replayed count sections against the version before; ex. = learned examples among them")


def _where(entry: dict[str, Any]) -> str:
    """``file:line · time`` of an entry (what is known of it)."""
    place = f"{entry['file']}:{entry['line']}" if entry.get("file") else "(no log line recorded)"
    when = entry.get("time")
    if when is not None:
        place += " · " + dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return place


def _describe(entry: dict[str, Any]) -> str:
    rows = f"{entry['rows']} row(s)" if entry.get("rows") else "no rows"
    if entry.get("example_id"):
        return f"example {entry['example_id']} ({rows}) from {_where(entry)}"
    if entry.get("source"):
        return f"section {entry['section_id']} ({rows}), written by {entry['source']}"
    return f"section {entry['section_id']} ({rows}), written by hand"


def _print_changes(changes: dict[str, Any], doc: Path, as_json: bool) -> None:
    if as_json:
        json.dump(changes, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return
    name = changes["version"]
    if not changes["has_manifest"]:
        print(f"{doc} {name}: no manifest (committed before learnerd wrote manifests); nothing to list")
        return
    previous = changes["previous_version"]
    against = f"v{previous:04d}" if previous is not None else "no earlier version"
    print(f"{doc} {name} ({changes['mode']}), against {against}:")
    for title in ("added", "removed", "replayed"):
        entries = changes[title]
        print(f"  {title}: {len(entries)}")
        for entry in entries:
            print(f"    {_describe(entry)}")
