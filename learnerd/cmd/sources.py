"""``learnerd sources``: the log files the analyzer tracks, each with the formats detected in it and how
far it has been read, and the blocks each source gave (see docs/inputs.md).

Reads the store (read-only) and the first records of each tracked file; needs no running daemon. A file's
formats are the readers that detect its first 200 records (``foreign`` for records none detects); its
``records`` are the lines (rows, for a SQLite log) read so far. Per source: blocks, blocks with an executed
command that failed, blocks with an intent (markdown context), learned examples, rejected attempts.
"""

from __future__ import annotations

import argparse
import json
import sys

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args, open_store, plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sources", help="tracked log files, their detected formats and counts", description=plain(__doc__)
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_common_options(p)
    p.set_defaults(func=run)


def collect(conn) -> dict:
    """``{"files": [{"host", "path", "formats": {name: records}, "records", "error"}], "sources": [{"source",
    "blocks", "failed", "with_intent", "examples", "rejected_attempts"}]}`` from the store ``conn``."""
    from learnerd.analyzer.formats import file_formats
    from learnerd.store.watermarks import load_watermarks, watermark_hosts

    files = []
    for host in watermark_hosts(conn):
        for wm in load_watermarks(conn, host):
            entry = {"host": host, "path": wm.path, "records": wm.line, "formats": {}, "error": ""}
            try:
                entry["formats"] = dict(file_formats(wm.path).most_common())
            except OSError as exc:
                entry["error"] = str(exc)
            files.append(entry)
    rows = conn.execute(
        "SELECT b.source, count(*), sum(CASE WHEN b.exit_code <> 0 THEN 1 ELSE 0 END),"
        " sum(CASE WHEN b.context <> '[]' THEN 1 ELSE 0 END), count(e.id),"
        " sum((SELECT count(*) FROM rejected_attempts r WHERE r.block_id = b.id))"
        " FROM blocks b LEFT JOIN examples e ON e.id = b.id GROUP BY b.source ORDER BY b.source"
    ).fetchall()
    keys = ("source", "blocks", "failed", "with_intent", "examples", "rejected_attempts")
    sources = [dict(zip(keys, (r[0], *(int(v or 0) for v in r[1:])), strict=True)) for r in rows]
    return {"files": files, "sources": sources}


def run(args: argparse.Namespace) -> int:
    cfg = load_config_from_args(args)
    if not cfg.layout.is_postgres and not cfg.layout.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.layout.db_path}: run `learnerd run` first")
    conn = open_store(cfg, readonly=True)
    try:
        report = collect(conn)
    finally:
        conn.close()
    if args.json:
        json.dump(report, sys.stdout, ensure_ascii=False, indent=2)
        print()
        return 0
    from rich.console import Console
    from rich.table import Table

    files = Table(title=f"{len(report['files'])} tracked file(s)")
    for column in ("path", "formats (records detected)", "records read"):
        files.add_column(column, justify="right" if column == "records read" else "left")
    for f in report["files"]:
        formats = ", ".join(f"{name} ({n})" for name, n in f["formats"].items()) or f["error"] or "-"
        files.add_row(f["path"] if not f["host"] else f"{f['host']}:{f['path']}", formats, f"{f['records']:,}")
    sources = Table(title="blocks per source")
    for column in ("source", "blocks", "failed", "with intent", "examples", "rejected attempts"):
        sources.add_column(column, justify="left" if column == "source" else "right")
    for s in report["sources"]:
        sources.add_row(s["source"], *(f"{s[k]:,}" for k in list(s)[1:]))
    console = Console()
    console.print(files)
    console.print(sources)
    return 0
