"""``learnerd run``: the daemon — tail the logs, learn continuously, until SIGINT/SIGTERM.

``--once`` ingests what the logs hold now, drains every queue, prints a summary and exits; it also
trains, once, every document whose training rows changed (after the pipeline's own document writes),
unless ``--no-train`` (or ``[training] enabled = false``) turns training off.
Otherwise the daemon serves the admin API on ``<state_dir>/learnerd.sock`` (``learnerd ctl``),
and ``/metrics`` and ``/search`` over TCP when asked (``--metrics-addr``, ``--listen-search``), and
talks to systemd (``Type=notify``) through ``$NOTIFY_SOCKET``; see :mod:`learnerd.daemon.service`.
``--listen-rpc HOST:PORT`` serves dlm's ``inject_probe`` on ``POST /rpc`` (``learnerd.api.rpc``);
the bearer token comes from ``$LEARNERD_PROBE_TOKEN``, and without it the daemon refuses to start.

Signals, all handled here: the first SIGINT or SIGTERM stops intake and drains in-flight work within
``[shutdown] drain_timeout_s`` (then cancels what is left; a training cycle in flight is cancelled and
the next start retrains), and exits 0; a second SIGINT stops at once (exit 130); SIGHUP re-reads the
config file (see :mod:`learnerd.daemon.reload`).
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
    p.add_argument(
        "--metrics-addr", metavar="HOST:PORT", help="also serve GET /metrics over TCP (default: [admin] metrics_addr)"
    )
    p.add_argument(
        "--listen-search",
        metavar="HOST:PORT",
        help="also serve POST /search over TCP, behind the bearer token in $LEARNERD_SEARCH_TOKEN "
        "(default: [admin] search_addr)",
    )
    add_common_options(p)
    p.set_defaults(func=run)


class HardStop(Exception):
    """A second SIGINT: stop now, without draining."""


async def serve(daemon, once: bool, options=None):
    """Run ``daemon`` (``once``, or as a :class:`~learnerd.daemon.service.Service` with ``options``
    until a signal or a drain request) with learnerd's signal handling; return its summary.

    Raises:
        HardStop: a second SIGINT arrived while draining.
        ServiceError: the admin socket or a TCP endpoint could not be set up.
    """
    import anyio
    import structlog

    from learnerd.daemon.service import Service, ServiceError

    log = structlog.get_logger(__name__)
    stop = anyio.Event()
    service = None if once else Service(daemon, stop, options)
    hard_stop = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch_signals() -> None:
                nonlocal hard_stop
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                    async for signum in signals:
                        if signum == signal.SIGHUP and service is None:
                            log.info("SIGHUP ignored: nothing to reload in --once mode")
                        elif signum == signal.SIGHUP:
                            log.info("signal received: reloading the config", signal="SIGHUP")
                            service.reload()
                        elif not stop.is_set():
                            name = signal.Signals(signum).name
                            log.info("signal received: stopping intake and draining", signal=name)
                            stop.set()
                        elif signum == signal.SIGINT:
                            log.warning("second SIGINT: stopping now")
                            hard_stop = True
                            daemon.stop_now()
                            tg.cancel_scope.cancel()

            tg.start_soon(watch_signals)
            summary = await (daemon.run_once(stop) if service is None else service.run())
            tg.cancel_scope.cancel()
    except* ServiceError as group:
        raise group.exceptions[0] from None
    if hard_stop:
        raise HardStop
    return summary


def service_options(cfg, args: argparse.Namespace):
    """The :class:`~learnerd.daemon.service.ServiceOptions` of the flags and the ``[admin]`` section.

    Raises:
        CommandError: a malformed address, or ``--listen-search`` without a usable token.
    """
    import os

    from learnerd.api.tcp_endpoints import SEARCH_TOKEN_ENV, TokenError, check_token
    from learnerd.cmd._common import read_config
    from learnerd.config import ConfigError, parse_host_port
    from learnerd.daemon.service import ServiceOptions

    metrics = args.metrics_addr or cfg.admin.metrics_addr
    search = args.listen_search or cfg.admin.search_addr
    token = None
    try:
        metrics_addr = parse_host_port(metrics, "--metrics-addr") if metrics else None
        search_addr = parse_host_port(search, "--listen-search") if search else None
        if search_addr is not None:
            token = check_token(os.environ.get(SEARCH_TOKEN_ENV))
    except (ConfigError, TokenError) as exc:
        raise CommandError(str(exc), exit_code=2) from exc

    return ServiceOptions(
        metrics_addr=metrics_addr,
        search_addr=search_addr,
        search_token=token,
        reload_config=(lambda: read_config(args)) if cfg.path is not None else None,
    )


def run(args: argparse.Namespace) -> int:
    import anyio

    from learnerd.cmd._report import print_summary
    from learnerd.daemon.app import Daemon
    from learnerd.daemon.service import ServiceError
    from learnerd.daemon.statelock import StateDirBusy, StateLock

    cfg = load_config_from_args(args)
    rpc_token = apply_training_options(args, cfg)
    options = None if args.once else service_options(cfg, args)
    try:
        lock = StateLock(cfg.state_dir)
        lock.acquire()
    except StateDirBusy as exc:
        raise CommandError(str(exc)) from exc
    try:
        daemon = Daemon(cfg, rpc_token=rpc_token)
        try:
            summary = anyio.run(serve, daemon, args.once, options)
        except HardStop:
            return 130
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
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
