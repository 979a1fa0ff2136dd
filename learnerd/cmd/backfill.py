"""``learnerd backfill --since T``: replay every block modified at or after T through the reconcilers.

Reconcilers are idempotent, so a replay of unchanged input changes nothing; the command prints what
did change (examples written or deleted, vectors embedded, probe sections rewritten).

When a daemon runs on the state directory, the backfill runs inside it (through the admin socket,
as ``learnerd ctl backfill`` does); otherwise this process runs the reconcilers itself.
"""

from __future__ import annotations

import argparse
import time

from learnerd.cmd._common import (
    CommandError,
    add_common_options,
    add_dir_options,
    load_config_from_args,
    parse_since,
    plain,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backfill", help="re-reconcile every block with updated_at >= T", description=plain(__doc__))
    p.add_argument("--since", required=True, metavar="T", help="ISO 8601 time, or a duration back (6h, 2h30m, 2d)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_dir_options(p)
    add_common_options(p)
    p.set_defaults(func=run)


def backfill_offline(cfg, since: float, as_json: bool):
    """Run the reconcilers in this process over the blocks since ``since``, showing the blocks done (a bar
    on a terminal, else lines on stdout; neither with ``as_json``); return the RunSummary."""
    import anyio
    from rich.console import Console

    from learnerd.cmd._common import open_daemon
    from learnerd.cmd._progress import progress_display
    from learnerd.daemon.statelock import StateDirBusy, StateLock
    from learnerd.store.state_dir import UnsafeStateDir

    lock = StateLock(cfg.state_dir)
    try:
        lock.acquire()
    except (StateDirBusy, UnsafeStateDir) as exc:
        raise CommandError(str(exc)) from exc
    try:
        daemon = open_daemon(cfg)
        try:
            with progress_display(None if as_json else Console(), lines=not as_json) as display:
                return anyio.run(
                    daemon.backfill, since, lambda done, total: display.update("backfill", done, total, unit="block")
                )
        finally:
            daemon.close()
    finally:
        lock.release()


def run(args: argparse.Namespace) -> int:
    from learnerd.cmd._client import DaemonNotRunning, client_for, follow_backfill
    from learnerd.cmd._render import backfill_line, print_json
    from learnerd.cmd._report import print_summary

    since = parse_since(args.since, time.time())
    cfg = load_config_from_args(args)
    try:
        job = follow_backfill(client_for(cfg), since, as_json=args.json)
    except DaemonNotRunning:
        pass
    else:
        if args.json:
            print_json(job)
        else:
            print(f"{backfill_line(job)} (in the running daemon)")
        return 0
    summary = backfill_offline(cfg, since, as_json=args.json)
    if not args.json and not summary.changed_anything():
        print("backfill: nothing changed")
    print_summary(summary, args.json, f"learnerd backfill --since {args.since}")
    return 0
