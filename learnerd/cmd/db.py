"""``learnerd db migrate`` and ``learnerd db check``: the store's schema version (SQLite or PostgreSQL).

``migrate`` brings the store named by ``[store] url`` (or ``--store-url``) up to this learnerd's
schema; on PostgreSQL it is the only way the schema changes (replicas refuse to start on an older one).
``check`` prints the store's version and this learnerd's, and exits 0 when they match, 1 when the store
needs ``migrate`` or is newer than this learnerd (or cannot be reached).
"""

from __future__ import annotations

import argparse
import json

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args, plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="the store's schema: migrate it, or check its version", description=plain(__doc__))
    commands = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    for name, help in (
        ("migrate", "apply the missing schema migrations (PostgreSQL: under an advisory lock)"),
        ("check", "compare the store's schema version with this learnerd's (exit 1 unless equal)"),
    ):
        c = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        c.add_argument("--json", action="store_true", help="print the result as JSON")
        add_common_options(c)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from learnerd.store import db

    cfg = load_config_from_args(args)
    target = cfg.layout.store_target
    try:
        if args.db_command == "migrate":
            before, after = db.migrate(target)
            result = {"store": db.redact(target), "before": before, "after": after, "code": db.SCHEMA_VERSION}
            message = f"{result['store']}: schema version {before} -> {after}"
        else:
            version = db.schema_version(target)
            result = {"store": db.redact(target), "version": version, "code": db.SCHEMA_VERSION}
            message = f"{result['store']}: schema version {version}, this learnerd's {db.SCHEMA_VERSION}"
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from exc
    print(json.dumps(result) if args.json else message)
    if args.db_command == "check" and result["version"] != db.SCHEMA_VERSION:
        if not args.json:
            print("run learnerd db migrate" if result["version"] < db.SCHEMA_VERSION else "upgrade learnerd")
        return 1
    return 0
