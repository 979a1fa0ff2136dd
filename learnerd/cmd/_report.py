"""Printing a :class:`~learnerd.daemon.app.RunSummary` for ``learnerd run --once`` and ``backfill``."""

from __future__ import annotations

import dataclasses
import json
import sys

from learnerd.cmd._render import rejected_rows
from learnerd.daemon.app import RunSummary


def summary_dict(summary: RunSummary) -> dict:
    """The summary as plain JSON-able data."""
    return dataclasses.asdict(summary)


def print_summary(summary: RunSummary, as_json: bool, title: str) -> None:
    """A readable table on stdout, then one ``warning:`` line per undertrained document; or the JSON of
    :func:`summary_dict`."""
    if as_json:
        json.dump(summary_dict(summary), sys.stdout, indent=2, default=str)
        print()
        return
    from rich.console import Console
    from rich.table import Table

    a = summary.analyzer
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in [
        ("blocks", summary.blocks),
        ("examples", summary.examples),
        ("vectors", summary.vectors),
        ("log lines read", a.lines_read),
        ("blocks changed by ingestion", a.blocks_changed),
        ("malformed lines skipped", a.malformed_lines),
        ("unknown events skipped", a.unknown_events),
        ("oversized lines skipped", a.oversized_lines),
        ("block events refused", a.refused_events),
        ("foreign lines skipped", a.foreign_lines),
        ("unjoinable foyle traces", sum(a.unjoinable_traces.values())),
        ("embedder calls", summary.embedder_calls),
        ("elapsed", f"{summary.elapsed_s:.1f} s"),
    ]:
        table.add_row(name, str(value))
    if a.last_malformed is not None:
        m = a.last_malformed
        table.add_row("last malformed line", f"{m.file}:{m.line}: {m.reason}")
    for controller, counts in summary.changes.items():
        for change, n in sorted(counts.items()):
            table.add_row(f"{controller}: {change.replace('_', ' ')}", str(n))
    for label, n in rejected_rows(vars(a)):
        table.add_row(label, str(n))
    for kind, n in sorted(a.redactions.items()):
        table.add_row(f"secrets redacted: <{kind}>", str(n))
    for reason, n in sorted(summary.refused_by_policy.items()):
        table.add_row(f"blocks {reason}", str(n))
    if summary.refused_examples:
        table.add_row("probes: examples refused (see --json)", str(len(summary.refused_examples)))
    for path, r in sorted(summary.recall.items()):
        name = path.rsplit("/", 1)[-1]
        table.add_row(f"probes passed {name} {r['version']} (as the gate counts)", f"{r['passed']}/{r['probes']}")
        table.add_row(
            f"probe recall {name} {r['version']} (base → adapter)",
            f"{r['before']}/{r['probes']} → {r['after']}/{r['probes']}",
        )
    for name, stats in summary.controllers.items():
        if stats.failures or stats.dropped or stats.terminal:
            table.add_row(
                f"{name}: failures / dropped / terminal", f"{stats.failures} / {stats.dropped} / {stats.terminal}"
            )
    Console().print(table)
    for path, reason in sorted(summary.undertrained.items()):
        print(f"warning: {path.rsplit('/', 1)[-1]}: {reason}")
