"""``learnerd run``: the daemon — tail the logs, learn continuously, until SIGINT/SIGTERM.

``--once`` ingests what the logs hold now, drains every queue, prints a summary and exits; it also
trains, once, every document whose training rows changed (after the pipeline's own document writes),
unless ``--no-train`` (or ``[training] enabled = false``) turns training off. When stdout is not a
terminal (and without ``--json``), it prints progress lines on the way (``learnerd.cmd._progress``): the
pipeline's keys, and each training cycle's and evaluation's steps.
Otherwise the daemon serves the admin API on ``<state_dir>/learnerd.sock`` (``learnerd ctl``),
and ``/metrics`` and ``/search`` over TCP when asked (``--metrics-addr``, ``--listen-search``), and
talks to systemd (``Type=notify``) through ``$NOTIFY_SOCKET``; see :mod:`learnerd.daemon.service`.
The bearer token of every TCP surface is the token file ``learnerd init`` writes (``<config dir>/token``,
``learnerd.api.tokens``), or the surface's environment variable.
``--listen-openai HOST:PORT`` serves the OpenAI-compatible ``/v1/models`` and ``/v1/chat/completions``
(``learnerd.api.openai_app``): a document's learned adapter only to a bearer of the token (else 401), base
models also without it on a loopback address; without any token only on a loopback address and never with
``[serve] rag_k`` set above 0 (its default quotes retrieved examples to bearers of the token only).
``--insecure-no-token`` serves the adapters to requests without the token too (on
loopback), with a warning in the log at start and every 10 minutes and in ``learnerd ctl status``.
``--listen-rpc HOST:PORT`` serves dlm's ``inject_probe`` on ``POST /rpc`` (``learnerd.api.rpc``);
the bearer token comes from ``$LEARNERD_PROBE_TOKEN`` or the token file, and without one the daemon refuses to start.

Signals, all handled here: the first SIGINT or SIGTERM stops intake and drains in-flight work within
``[shutdown] drain_timeout_s`` (then cancels what is left; a training cycle in flight is cancelled and
the next start retrains), and exits 0; a second SIGINT stops at once (exit 130); SIGHUP re-reads the
config file (see :mod:`learnerd.daemon.reload`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from learnerd.cmd._common import CommandError, add_common_options, add_dir_options, load_config_from_args, plain
from learnerd.cmd._training_options import add_training_options, apply_training_flags, apply_training_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run the daemon (or --once: ingest, reconcile, drain, exit)", description=plain(__doc__)
    )
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
        help="also serve POST /search over TCP, behind the bearer token ($LEARNERD_SEARCH_TOKEN, else the token "
        "file of `learnerd init`; default: [admin] search_addr)",
    )
    p.add_argument(
        "--listen-openai",
        metavar="HOST:PORT",
        help="also serve the OpenAI-compatible /v1/models and /v1/chat/completions: the documents' learned adapters "
        "to bearers of the token ($LEARNERD_OPENAI_TOKEN, else the token file of `learnerd init`), base models "
        "also without it on a loopback HOST (default: [serve] listen)",
    )
    p.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="INSECURE: on a loopback --listen-openai, serve the documents' learned adapters to requests without "
        "the token too (any local user); logged as a warning at start and every 10 minutes, shown by ctl status",
    )
    add_common_options(p)
    p.set_defaults(func=run)


class HardStop(Exception):
    """A second SIGINT: stop now, without draining."""


PROGRESS_POLL_S = 0.5
"""How often ``run --once`` reads the daemon's progress (seconds)."""


async def follow_progress(daemon: Any, display: Any) -> None:
    """Report ``daemon``'s work to ``display`` (a :class:`~learnerd.cmd._progress.ProgressDisplay`) until
    cancelled: ``pipeline`` — keys reconciled of those reconciled, queued, waiting and in flight, over the
    controllers that report no progress of their own, while any is busy — and a task per key of each
    controller that does (``training notes.dlm``: its optimizer steps; ``evaluation notes.dlm``: its steps)."""
    import anyio

    from learnerd.runtime.progress import MEASURES

    shown: set[str] = set()
    while True:
        progress = daemon.progress()
        stats = [c.stats() for name, c in daemon.controllers.items() if name not in progress]
        done = sum(s.reconciles for s in stats)
        left = sum(s.queue_depth + s.waiting + len(s.in_flight) for s in stats)
        current = set()
        if left:
            display.update("pipeline", done, done + left, unit="key")
            current.add("pipeline")
        for controller, keys in progress.items():
            for key, p in keys.items():
                task = f"{controller} {Path(key).name}"
                fields = {k: v for k, v in p.items() if k not in (*MEASURES, "doc_key")}
                display.update(task, p["step"], p["total"], **fields)
                current.add(task)
        for task in shown - current:
            display.finish(task)
        shown = current
        await anyio.sleep(PROGRESS_POLL_S)


async def serve(daemon, once: bool, options=None, display=None):
    """Run ``daemon`` (``once``, or as a :class:`~learnerd.daemon.service.Service` with ``options``
    until a signal or a drain request) with learnerd's signal handling; return its summary. With ``once``,
    ``display`` (if given) shows the run's progress (:func:`follow_progress`).

    Raises:
        HardStop: a second SIGINT arrived while draining.
        ServiceError: the admin socket or a TCP endpoint could not be set up.
    """
    import anyio
    import anyio.abc
    import structlog

    from learnerd.daemon.service import Service, ServiceError

    log = structlog.get_logger(__name__)
    stop = anyio.Event()
    service = None if once else Service(daemon, stop, options)
    hard_stop = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch_signals(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                nonlocal hard_stop
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                    task_status.started()  # the handlers are installed before the admin socket is bound
                    async for signum in signals:
                        if signum == signal.SIGHUP and service is None:
                            log.info("SIGHUP ignored: nothing to reload in --once mode")
                        elif signum == signal.SIGHUP and service is not None:
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

            await tg.start(watch_signals)
            if once and display is not None:
                tg.start_soon(follow_progress, daemon, display)
            summary = await (daemon.run_once(stop) if service is None else service.run())
            tg.cancel_scope.cancel()
    except* ServiceError as group:
        raise group.exceptions[0] from None
    if hard_stop:
        raise HardStop
    return summary


def apply_flags(args: argparse.Namespace, cfg):
    """``cfg`` with the command line's settings applied: ``--no-train``, ``--listen-rpc``, ``--metrics-addr``,
    ``--listen-search``, ``--listen-openai``; returns ``cfg``. A reload applies them to the re-read file too, so it
    reports only what changed in the file.

    Raises:
        CommandError: a malformed ``--listen-rpc`` (exit 2).
    """
    apply_training_flags(args, cfg)
    cfg.admin.metrics_addr = args.metrics_addr or cfg.admin.metrics_addr
    cfg.admin.search_addr = args.listen_search or cfg.admin.search_addr
    cfg.serve.listen = args.listen_openai or cfg.serve.listen
    return cfg


def service_options(cfg, args: argparse.Namespace):
    """The :class:`~learnerd.daemon.service.ServiceOptions` of the flags and the ``[admin]`` and ``[serve]``
    sections, with the tokens (:func:`~learnerd.api.tokens.surface_token`).

    Raises:
        CommandError: a malformed address, ``--listen-search`` without a usable token, ``--listen-openai``
            without one off loopback or with ``[serve] rag_k`` set above 0 (retrieval needs a token, as search does;
            the default serves retrieval to bearers only, so a token-less endpoint serves none),
            ``--insecure-no-token`` without a loopback ``--listen-openai``, an unsafe token file.
    """
    from learnerd.api.settings import OPENAI_TOKEN_ENV, is_loopback, parse_host_port
    from learnerd.api.tcp_endpoints import SEARCH_TOKEN_ENV
    from learnerd.api.tokens import TokenError, check_token, surface_token, token_path
    from learnerd.cmd._common import read_config
    from learnerd.daemon.service import ServiceOptions
    from learnerd.sections import ConfigError

    apply_flags(args, cfg)
    metrics, search, openai = cfg.admin.metrics_addr, cfg.admin.search_addr, cfg.serve.listen
    path = token_path(cfg.path)
    search_token = openai_token = openai_source = None
    try:
        metrics_addr = parse_host_port(metrics, "--metrics-addr") if metrics else None
        search_addr = parse_host_port(search, "--listen-search") if search else None
        openai_addr = parse_host_port(openai, "--listen-openai") if openai else None
        if search_addr is not None:
            found = surface_token(SEARCH_TOKEN_ENV, cfg.path)[0]
            search_token = check_token(found, SEARCH_TOKEN_ENV, "serving search over TCP", path)
        if openai_addr is not None:
            openai_token, openai_source = surface_token(OPENAI_TOKEN_ENV, cfg.path)
            loopback = is_loopback(openai_addr[0])
            if openai_token is not None or not loopback:
                openai_token = check_token(
                    openai_token, OPENAI_TOKEN_ENV, f"serving chat completions on {openai}", path
                )
            if cfg.serve.rag_k > 0 and "rag_k" in cfg.serve.model_fields_set:  # retrieval: what everyone ran
                what = "serving retrieved examples ([serve] rag_k)"
                openai_token = check_token(openai_token, OPENAI_TOKEN_ENV, what, path)
            if args.insecure_no_token and not loopback:
                raise TokenError(
                    f"--insecure-no-token serves requests without the token on loopback only, not {openai}"
                )
        elif args.insecure_no_token:
            raise TokenError(
                "--insecure-no-token is about the OpenAI endpoint: add --listen-openai (or [serve] listen)"
            )
    except (ConfigError, TokenError) as exc:
        raise CommandError(str(exc), exit_code=2) from exc

    return ServiceOptions(
        metrics_addr=metrics_addr,
        search_addr=search_addr,
        search_token=search_token,
        openai_addr=openai_addr,
        openai_token=openai_token,
        openai_token_source=openai_source,
        insecure_no_token=args.insecure_no_token,
        reload_config=(lambda: apply_flags(args, read_config(args))) if cfg.path is not None else None,
    )


def warn_if_nothing_is_watched(cfg) -> None:
    """Log a warning when ``log_dirs`` is empty and no RPC listener takes ``POST /v1/blocks``: the daemon would
    run, and ``--once`` succeed, on zero lines without a word."""
    import structlog

    if cfg.log_dirs or cfg.rpc.listen:
        return
    where = f"in {cfg.path}" if cfg.path else "(no config file was found: see learnerd init)"
    structlog.get_logger(__name__).warning(
        f"no log directory is watched: set log_dirs {where} or pass --log-dir DIR", config=str(cfg.path or "")
    )


def _open_daemon(cfg, rpc_token):
    """``Daemon(cfg)``; a damaged or foreign database file is a :class:`CommandError`, not a traceback."""
    import sqlite3

    from learnerd.daemon.app import Daemon
    from learnerd.store.db import SchemaError, StoreUnavailable

    try:
        return Daemon(cfg, rpc_token=rpc_token)
    except (SchemaError, StoreUnavailable) as exc:
        raise CommandError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise CommandError(
            f"{cfg.layout.db_path}: cannot use the database ({exc}); move the file aside to start afresh"
        ) from None


def sole_exception(group: BaseExceptionGroup) -> BaseException:
    """The one exception a task group's nested groups wrap, or the group itself when it holds several."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run(args: argparse.Namespace) -> int:
    import atexit
    import gc

    import anyio

    # The interpreter's last garbage collections skip what is alive at exit (torch's and transformers' object
    # graphs: seconds on a loaded machine, between a SIGTERM's drain and the process's end); the OS frees it all.
    atexit.register(gc.freeze)

    from learnerd.cmd._progress import progress_display
    from learnerd.cmd._report import print_summary
    from learnerd.daemon.service import ServiceError
    from learnerd.daemon.statelock import StateDirBusy, StateLock
    from learnerd.ml.embedders import EmbedderError
    from learnerd.store.state_dir import UnsafeStateDir

    cfg = load_config_from_args(args)
    rpc_token = apply_training_options(args, cfg)
    warn_if_nothing_is_watched(cfg)
    options = None if args.once else service_options(cfg, args)
    try:
        lock = StateLock(cfg.state_dir)
        lock.acquire()
    except (StateDirBusy, UnsafeStateDir) as exc:
        raise CommandError(str(exc)) from exc
    try:
        daemon = _open_daemon(cfg, rpc_token)
        try:
            with progress_display(lines=args.once and not args.json) as display:
                summary = anyio.run(serve, daemon, args.once, options, display)
        except HardStop:
            return 130
        except (ServiceError, EmbedderError) as exc:
            raise CommandError(str(exc)) from exc
        except BaseExceptionGroup as group:  # a failure inside the daemon's task group
            inner = sole_exception(group)
            if isinstance(inner, EmbedderError):
                raise CommandError(str(inner)) from inner
            raise
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
        dropped = {name: stats.dropped for name, stats in summary.controllers.items() if stats.dropped}
        if dropped:
            counts = ", ".join(f"{n} {name}" for name, n in dropped.items())
            print(
                f"learnerd run: error: work dropped after repeated failures ({counts} key(s)); see the log",
                file=sys.stderr,
            )
            return 1
    return 0
