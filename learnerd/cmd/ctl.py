"""``learnerd ctl …``: steer the running daemon through its admin socket (``<state_dir>/learnerd.sock``).

One subcommand per endpoint of :mod:`learnerd.api.admin`; readable tables by default, the raw
JSON answer with ``--json``. Exit status: 0 done, 1 refused or failed, 2 bad arguments, 3 no daemon
is running.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from learnerd.cmd._common import add_common_options, load_config_from_args, parse_since, plain
from learnerd.daemon.logging import LEVELS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ctl", help="status and steering of the running daemon (admin socket)", description=plain(__doc__)
    )
    commands = p.add_subparsers(dest="ctl_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        c.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
        add_common_options(c)
        return c

    command("status", help="uptime, queues, in-flight keys, retries, last errors, counts")
    c = command("pause", help="stop reconciling (intake keeps queueing)")
    c.add_argument("controller", nargs="?", help="one controller (default: all)")
    c = command("resume", help="undo pause")
    c.add_argument("controller", nargs="?", help="one controller (default: all)")
    c = command("requeue", help="queue a key on a controller now, its backoff reset")
    c.add_argument("controller")
    c.add_argument("key")
    c = command("backfill", help="re-reconcile every block with updated_at >= T, in the daemon")
    c.add_argument("--since", required=True, metavar="T", help="ISO 8601 time, or a duration back (6h, 2h30m, 2d)")
    c.add_argument("--no-wait", action="store_true", help="start it and return; see `ctl status` for progress")
    c = command("drain", help="finish in-flight work, stop intake, exit")
    c.add_argument("--wait", action="store_true", help="return once the daemon has exited")
    command("reload", help="re-read the config file (as SIGHUP does)")
    c = command("log-level", help="show or change the log level")
    c.add_argument("level", nargs="?", choices=LEVELS, help="the new level (omit to show it)")
    command("metrics", help="the Prometheus metrics, as text (--json: metric family -> type, help, samples)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from learnerd.cmd import _render
    from learnerd.cmd._client import DaemonNotRunning, client_for, follow_backfill

    cfg = load_config_from_args(args)
    client = client_for(cfg)
    command = args.ctl_command
    show: Callable[[Any], None]  # the renderer of the answer

    if command == "status":
        answer, show = client.call("GET", "/status"), _render.print_status
    elif command in ("pause", "resume"):
        body = {"controller": args.controller} if args.controller else {}
        answer, show = client.call("POST", f"/{command}", body), _render.print_paused
    elif command == "requeue":
        answer = client.call("POST", "/requeue", {"controller": args.controller, "key": args.key})
        show = _render.print_requeued
    elif command == "backfill":
        since = parse_since(args.since, time.time())
        if args.no_wait:
            answer = client.call("POST", "/backfill", {"since": since})
        else:
            answer = follow_backfill(client, since, as_json=args.json)
        show = _render.print_backfill
    elif command == "drain":
        answer, show = client.call("POST", "/drain"), _render.print_drain
        if args.wait:
            while True:
                try:
                    client.call("GET", "/status")
                except DaemonNotRunning:
                    break
                time.sleep(0.2)
            answer = {**answer, "state": "exited"}
    elif command == "reload":
        answer, show = client.call("POST", "/reload"), _render.print_reload
    elif command == "log-level":
        if args.level:
            answer = client.call("POST", "/log-level", {"level": args.level})
        else:
            answer = client.call("GET", "/log-level")
        show = _render.print_log_level
    else:  # metrics: Prometheus text as it is, or parsed into JSON
        text = client.call("GET", "/metrics")
        if not args.json:
            print(text, end="")
            return 0
        answer, show = _render.metrics_json(text), _render.print_json
    (_render.print_json if args.json else show)(answer)
    return 0
