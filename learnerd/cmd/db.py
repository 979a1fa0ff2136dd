"""``learnerd db migrate``, ``learnerd db check`` and ``learnerd db scrub``: the store's schema migrations (SQLite or
PostgreSQL: :mod:`learnerd.store.db`), and secrets redacted from what is already stored.

``migrate`` applies the migrations the store named by ``[store] url`` (or ``--store-url``) lacks; on
PostgreSQL it is the only way the schema changes (replicas refuse to start while one is missing).
``check`` prints the migrations the store lacks or does not know, and exits 0 when it holds exactly this
learnerd's, 1 when it needs ``migrate`` or is newer than this learnerd (or cannot be reached). ``scrub`` runs
the privacy screen (``[privacy]``: the secret redactor, and the policy on examples and sections) once over the
stored state — tables, the documents' auto-written sections, the probe journal, the ``POST /v1/blocks`` log
files, evaluation reports, foyle export files — with the state directory locked (no daemon may run;
:mod:`learnerd.store.scrub`); ``--dry-run`` shows what would change.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError, add_common_options, add_dir_options, load_config_from_args, plain

if TYPE_CHECKING:
    from learnerd.daemon.config import Config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="the store's schema: migrate it, or check its version", description=plain(__doc__))
    commands = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    for name, help in (
        ("migrate", "apply the missing schema migrations (PostgreSQL: under an advisory lock)"),
        ("check", "compare the store's migrations with this learnerd's (exit 1 unless the same)"),
        ("scrub", "redact secrets from the stored state once (tables, documents, journals; no daemon may run)"),
    ):
        c = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        c.add_argument("--json", action="store_true", help="print the result as JSON")
        if name == "scrub":
            c.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
            add_dir_options(c)
        add_common_options(c)
    p.set_defaults(func=run)


def scrub(cfg: Config, dry_run: bool) -> dict[str, Any]:
    """The scrub of :mod:`learnerd.store.scrub` over ``cfg``'s state, under the state directory's lock.

    Raises:
        CommandError: a daemon runs on the state directory, the store cannot be opened, or a document does
            not parse (nothing of it written; fix it and scrub again).
    """
    from learnerd.cmd._common import open_store
    from learnerd.daemon.control import forget_scope
    from learnerd.daemon.statelock import StateDirBusy, StateLock
    from learnerd.eval.history import REPORT_FILE
    from learnerd.privacy.screen import Screen
    from learnerd.store import scrub as scrubbing
    from learnerd.store.dlm import ConflictError, DocumentError
    from learnerd.store.state_dir import UnsafeStateDir

    if not cfg.layout.is_postgres and not cfg.layout.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.layout.db_path}: nothing to scrub")
    lock = StateLock(cfg.state_dir)
    try:
        lock.acquire()
    except (StateDirBusy, UnsafeStateDir) as exc:
        raise CommandError(f"{exc} (scrub needs the daemon stopped: learnerd ctl drain)") from exc
    conn = open_store(cfg)
    try:
        screen, report = Screen(cfg.privacy), scrubbing.ScrubReport(dry_run=dry_run)
        documents, export_dir = forget_scope(cfg)
        scrubbing.scrub_store(conn, screen, report, export_dir)
        try:
            scrubbing.scrub_documents(documents, screen, report)
        except (DocumentError, ConflictError) as exc:
            raise CommandError(f"not scrubbed: {exc}") from exc
        scrubbing.scrub_lines(cfg.layout.probe_journal, screen, report, journal=True)
        ingest = sorted(cfg.layout.ingest_dir.glob("*.jsonl")) if cfg.layout.ingest_dir.is_dir() else []
        rewritten = [path for path in ingest if scrubbing.scrub_lines(path, screen, report)]
        if not dry_run:
            scrubbing.drop_watermarks(conn, rewritten)
        adapters = cfg.layout.adapters_dir
        for path in sorted(adapters.rglob(REPORT_FILE)) if adapters.is_dir() else ():
            scrubbing.scrub_json_file(path, screen, report)
        return report.to_json()
    finally:
        conn.close()
        lock.release()


def _print_scrub(result: dict[str, Any]) -> None:
    verb = "would redact" if result["dry_run"] else "redacted"
    total = sum(result["redacted"].values())
    print(f"{verb} {total} secret(s)" + "".join(f", <{k}> {n}" for k, n in result["redacted"].items()))
    for table, n in result["tables"].items():
        print(f"  table {table}: {n} row(s)")
    print(f"  vectors deleted (embedded again at the next run): {result['vectors']}")
    for path, n in {**result["documents"], **result["files"]}.items():
        print(f"  {path}: {n} section(s) or line(s)")
    print(f"  foyle export files deleted (written again at the next run): {result['export_files']}")
    print(f"  examples, sections and journal probes the privacy policy refuses, deleted: {result['refused']}")
    if result["documents"] and not result["dry_run"]:
        print("  the documents above retrain from scratch at their next cycle")


def run(args: argparse.Namespace) -> int:
    from learnerd.store import db

    cfg = load_config_from_args(args)
    if args.db_command == "scrub":
        result = scrub(cfg, args.dry_run)
        if args.json:
            print(json.dumps(result))
        else:
            _print_scrub(result)
        return 0
    target = cfg.layout.store_target
    try:
        state = db.status(target)
        if args.db_command == "migrate":
            applied = db.migrate(target)
            result = {"store": db.redact(target), "applied": [list(k) for k in applied], "numbered": state.numbered}
            message = f"{result['store']}: " + (f"applied {db.label(applied)}" if applied else "nothing to apply")
            if state.numbered:
                message += f"; its schema version {state.numbered} is now recorded by name"
        else:
            result = {
                "store": db.redact(target),
                "applied": [list(k) for k in state.applied],
                "pending": [list(m.key) for m in state.pending],
                "unknown": [list(k) for k in state.unknown],
            }
            message = f"{result['store']}: {len(state.applied)} migrations applied"
            if state.pending:
                message += f", lacks {db.label([m.key for m in state.pending])}"
            if state.unknown:
                message += f", records {db.label(state.unknown)}, unknown to this learnerd"
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from exc
    print(json.dumps(result) if args.json else message)
    if args.db_command == "check" and not state.current:
        if not args.json:
            print("upgrade learnerd" if state.unknown else "run learnerd db migrate")
        return 1
    return 0
