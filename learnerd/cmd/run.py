"""``learnerd run``: the daemon — tail the logs, learn continuously, until SIGINT/SIGTERM.

``--once`` ingests what the logs hold now, drains every queue, prints a summary and exits; it also
trains, once, every document whose training rows changed (after the pipeline's own document writes),
unless ``--no-train`` (or ``[training] enabled = false``) turns training off.
The first SIGINT or SIGTERM stops intake and drains in-flight work within
``[shutdown] drain_timeout_s``, then exits 0 (a training cycle in flight is cancelled: the next start
retrains); a second SIGINT stops at once (exit 130).

``--listen-rpc HOST:PORT`` serves dlm's ``inject_probe`` on ``POST /rpc`` (``learnerd.daemon.rpc``);
the bearer token comes from ``$LEARNERD_PROBE_TOKEN``, and without it the daemon refuses to start.
"""

from __future__ import annotations

import argparse
import signal

from learnerd.cmd._common import CommandError, add_common_options, add_dir_options, load_config_from_args
from learnerd.cmd._training_options import add_training_options, apply_training_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the daemon (or --once: ingest, reconcile, drain, exit)")
    p.add_argument("--once", action="store_true", help="ingest what is there, drain all queues, print a summary, exit")
    add_dir_options(p)
    add_training_options(p)
    p.add_argument("--json", action="store_true", help="print the --once summary as JSON")
    add_common_options(p)
    p.set_defaults(func=run)


class HardStop(Exception):
    """A second SIGINT: stop now, without draining."""


async def serve(daemon, once: bool):
    """Run ``daemon`` (``once`` or until a signal) with learnerd's signal handling; return its summary.

    Raises:
        HardStop: a second SIGINT arrived while draining.
    """
    import anyio
    import structlog

    log = structlog.get_logger(__name__)
    stop = anyio.Event()
    hard_stop = False
    async with anyio.create_task_group() as tg:

        async def watch_signals() -> None:
            nonlocal hard_stop
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    if not stop.is_set():
                        log.info("signal received: stopping intake and draining", signal=signal.Signals(signum).name)
                        stop.set()
                    elif signum == signal.SIGINT:
                        log.warning("second SIGINT: stopping now")
                        hard_stop = True
                        tg.cancel_scope.cancel()

        tg.start_soon(watch_signals)
        summary = await (daemon.run_once(stop) if once else daemon.run(stop))
        tg.cancel_scope.cancel()
    if hard_stop:
        raise HardStop
    return summary


def run(args: argparse.Namespace) -> int:
    import anyio

    from learnerd.cmd._report import print_summary
    from learnerd.daemon.app import Daemon
    from learnerd.daemon.statelock import StateDirBusy, StateLock

    cfg = load_config_from_args(args)
    rpc_token = apply_training_options(args, cfg)
    try:
        lock = StateLock(cfg.state_dir)
        lock.acquire()
    except StateDirBusy as exc:
        raise CommandError(str(exc)) from exc
    try:
        daemon = Daemon(cfg, rpc_token=rpc_token)
        try:
            summary = anyio.run(serve, daemon, args.once)
        except HardStop:
            return 130
        except OSError as exc:
            if not cfg.rpc.listen:
                raise
            raise CommandError(f"cannot serve RPC on {cfg.rpc.listen}: {exc}") from exc
        finally:
            daemon.close()
    finally:
        lock.release()
    if args.once:
        print_summary(summary, args.json, "learnerd run --once")
    return 0
