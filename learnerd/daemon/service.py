"""The daemon as a service: the admin socket, the optional TCP endpoints and systemd's notifications
around :meth:`Daemon.run <learnerd.daemon.app.Daemon.run>`.

Order of events (``learnerd run``; tests run the same in-process)::

    state dir 0700, admin socket bound (stale one replaced)    STATUS=starting: loading the embedder
    controllers paused before the restart paused again          (before any of them runs)
    admin API, --metrics-addr, --listen-search serving          (ctl status works while the model loads)
    embedder loaded, controllers running, resync queued         READY=1  (task_status.started())
    ... serving: SIGHUP / POST /reload                          RELOADING=1 … READY=1
    stop set (SIGTERM, first SIGINT, POST /drain)               STOPPING=1; intake stops, queues drain
    Daemon.run returns                                          endpoints closed, socket file removed

Signals are not handled here (``learnerd run`` does, in one place); the caller owns ``stop``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import structlog
from aiohttp import web

from learnerd.api.admin import admin_app
from learnerd.api.errors import ControlError
from learnerd.api.http import ServerLimits, setup_runner
from learnerd.api.openai_app import openai_app
from learnerd.api.settings import is_loopback
from learnerd.api.tcp_endpoints import metrics_app, search_app
from learnerd.api.unix_socket import (
    AdminSocket,
    SocketInUse,
    bind_admin_socket,
    remove_admin_socket,
)
from learnerd.daemon import sd_notify, wiring
from learnerd.daemon.app import Daemon, RunSummary
from learnerd.daemon.config import Config
from learnerd.daemon.control import DaemonControl
from learnerd.daemon.logging import adopt_library_loggers
from learnerd.store.embeddings import count_vectors
from learnerd.store.examples import count_examples
from learnerd.store.state_dir import UnsafeStateDir, secure_state_dir

log = structlog.get_logger(__name__)

#: Seconds the HTTP servers give open requests to finish when the daemon exits.
HTTP_SHUTDOWN_TIMEOUT_S = 2.0
#: Seconds between the warnings that ``--insecure-no-token`` serves learned adapters without a token.
INSECURE_WARNING_INTERVAL_S = 600.0
INSECURE_WARNING = (
    "--insecure-no-token: the OpenAI endpoint serves the documents' learned adapters to requests without the token "
    "(any local user may read what they learned)"
)


class ServiceError(RuntimeError):
    """The service could not start: the socket is taken, the state directory is unsafe, a port is busy."""


@dataclass
class ServiceOptions:
    """What to serve beside the admin socket.

    ``search_token`` is required with ``search_addr`` (check it with :func:`~learnerd.api.tokens.check_token`);
    ``openai_addr`` serves the OpenAI-compatible endpoint: the documents' adapters to bearers of ``openai_token``
    (``openai_token_source`` says where it came from, for the status), base models also to requests without it on
    a loopback address, and with ``insecure_no_token`` the adapters too (loud: logged at start and every
    :data:`INSECURE_WARNING_INTERVAL_S`, in the status); the caller refuses a non-loopback address without a token;
    ``reload_config`` re-reads the config file with the command line's overrides (None: started without
    a config file, reload refused); ``limits`` bound what a client may hold of each listener (timeouts,
    connection cap).
    """

    metrics_addr: tuple[str, int] | None = None
    search_addr: tuple[str, int] | None = None
    search_token: str | None = None
    openai_addr: tuple[str, int] | None = None
    openai_token: str | None = None
    openai_token_source: str | None = None
    insecure_no_token: bool = False
    reload_config: Callable[[], Config] | None = None
    limits: ServerLimits = field(default_factory=ServerLimits)


def _url(addr: tuple[str, int] | None, path: str) -> str | None:
    if addr is None:
        return None
    host = f"[{addr[0]}]" if ":" in addr[0] else addr[0]
    return f"http://{host}:{addr[1]}{path}"


def _openai_access(opts: ServiceOptions) -> dict[str, Any] | None:
    """Who the OpenAI endpoint serves, for the status and the endpoint: ``token``, where its token came from (None:
    no token); ``without_token``, what a request without it gets: ``"none"`` (off loopback: 401), ``"bases"``
    (loopback: the base models) or ``"all"`` (``--insecure-no-token``); None when the endpoint is off."""
    if opts.openai_addr is None:
        return None
    loopback = is_loopback(opts.openai_addr[0])
    without = "none" if not loopback else "all" if opts.insecure_no_token else "bases"
    return {"token": opts.openai_token_source, "without_token": without, "insecure_no_token": opts.insecure_no_token}


async def _keep_warning_insecure() -> None:
    """Log :data:`INSECURE_WARNING` now and every :data:`INSECURE_WARNING_INTERVAL_S` until cancelled."""
    while True:
        log.warning(INSECURE_WARNING)
        await anyio.sleep(INSECURE_WARNING_INTERVAL_S)


class Service:
    """Runs ``daemon`` until ``stop`` is set, serving the admin API (see the module docstring).

    Args:
        daemon: a constructed, not yet running daemon; its state directory's lock must be held.
        stop: set it to stop intake, drain and return (the admin API's ``drain`` sets it too).
        options: the TCP endpoints and the config reloader.

    Raises:
        ValueError: ``search_addr`` without ``search_token``.
    """

    def __init__(self, daemon: Daemon, stop: anyio.Event, options: ServiceOptions | None = None) -> None:
        self.daemon = daemon
        self.stop = stop
        self.options = options or ServiceOptions()
        if self.options.search_addr is not None and not self.options.search_token:
            raise ValueError("search_addr needs search_token")
        self.openai_access = _openai_access(self.options)
        self.control = DaemonControl(
            daemon,
            stop,
            reload_config=self.options.reload_config,
            endpoints={
                "admin_socket": str(daemon.cfg.layout.socket_path),
                "metrics": _url(self.options.metrics_addr, "/metrics"),
                "search": _url(self.options.search_addr, "/search"),
                "openai": _url(self.options.openai_addr, "/v1"),
            },
            openai_access=self.openai_access,
            warnings=[INSECURE_WARNING] if self._insecure else [],
            max_k=daemon.cfg.admin.max_k,
        )
        self.catalog = wiring.model_catalog(daemon.cfg)

    @property
    def _insecure(self) -> bool:
        return self.options.insecure_no_token and self.options.openai_addr is not None

    def reload(self) -> dict[str, Any] | None:
        """Reload the config (SIGHUP); errors are logged, never raised: whatever goes wrong, the daemon keeps
        running on the config it has. Returns the reload's result, None when nothing was applied."""
        sd_notify.reloading()
        try:
            return self.control.reload()
        except ControlError as exc:
            log.error("reload refused", error=str(exc))
            return None
        except Exception:  # a reload must never end the process (SIGHUP)
            log.exception("reload failed; keeping the running config")
            return None
        finally:
            sd_notify.notify("READY=1", f"STATUS={self._status_line()}")

    def _status_line(self) -> str:
        if self.stop.is_set():
            return "draining"
        conn = self.daemon.conn
        return f"serving: {count_examples(conn)} examples, {count_vectors(conn)} vectors"

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> RunSummary:
        """Serve, run the daemon until ``stop`` is set and it has drained, clean up; return its summary.

        Reports started (``await task_group.start(service.run)``) at ``READY=1``.

        Raises:
            ServiceError: the admin socket or a TCP endpoint could not be set up.
        """
        cfg = self.daemon.cfg
        try:
            secure_state_dir(cfg.state_dir)
            admin = bind_admin_socket(cfg.layout.socket_path)
        except (SocketInUse, UnsafeStateDir, OSError) as exc:
            raise ServiceError(f"cannot serve the admin socket: {exc}") from exc
        runners: list[web.AppRunner] = []
        try:
            self.control.restore_paused()
            await self._start_endpoints(admin, runners)
            sd_notify.notify("STATUS=starting: loading the embedder")
            async with anyio.create_task_group() as tg:
                self.control.attach(tg)
                tg.start_soon(self._announce_stopping, name="announce-stopping")
                tg.start_soon(sd_notify.keep_alive, name="sd-watchdog")
                if self._insecure:
                    tg.start_soon(_keep_warning_insecure, name="insecure-no-token-warning")

                def started() -> None:
                    adopt_library_loggers()
                    self.control.mark_running()
                    status = self._status_line()
                    sd_notify.notify("READY=1", f"STATUS={status}")
                    log.info("learnerd ready", status=status, **self.control.endpoints)
                    if self.daemon.served is not None and self.options.openai_addr is not None:
                        # after the embedder's load: two threads importing transformers at once can fail
                        tg.start_soon(self._warm_models, name="warm-models")
                    task_status.started()

                summary = await self.daemon.run(self.stop, started)
                tg.cancel_scope.cancel()
            return summary
        finally:
            with anyio.CancelScope(shield=True):
                for runner in reversed(runners):
                    await runner.cleanup()
            remove_admin_socket(admin)

    async def _start_endpoints(self, admin: AdminSocket, runners: list[web.AppRunner]) -> None:
        """Serve the admin API on ``admin`` and the TCP endpoints asked for; record the addresses bound
        (a port 0 becomes the port the kernel chose) in the status's ``endpoints``."""
        cfg = self.daemon.cfg
        opts = self.options
        await self._serve(
            admin_app(self.control, self.daemon.registry, cfg.admin.max_body_bytes),
            lambda r: web.SockSite(r, admin.sock),
            str(admin.path),
            runners,
            opts.limits,
        )
        if opts.metrics_addr is not None:
            host, port = opts.metrics_addr
            runner = await self._serve(
                metrics_app(self.daemon.registry, lambda: self.control.state, self.control.unready_reason),
                lambda r: web.TCPSite(r, host, port),
                f"{host}:{port}",
                runners,
                opts.limits,
            )
            self.control.endpoints["metrics"] = _url(runner.addresses[0][:2], "/metrics")
        if opts.search_addr is not None:
            s_host, s_port = opts.search_addr
            runner = await self._serve(
                search_app(self.control, opts.search_token or "", cfg.admin.max_body_bytes),
                lambda r: web.TCPSite(r, s_host, s_port),
                f"{s_host}:{s_port}",
                runners,
                opts.limits,
            )
            self.control.endpoints["search"] = _url(runner.addresses[0][:2], "/search")
        if opts.openai_addr is not None and self.daemon.served is not None:
            o_host, o_port = opts.openai_addr
            app = openai_app(
                self.catalog,
                self.daemon.served,
                self.control,
                cfg.serve,
                self.daemon.registry,
                opts.openai_token,
                without_token=self.openai_access["without_token"] if self.openai_access else "none",
            )
            runner = await self._serve(
                app, lambda r: web.TCPSite(r, o_host, o_port), f"{o_host}:{o_port}", runners, opts.limits
            )
            self.control.endpoints["openai"] = _url(runner.addresses[0][:2], "/v1")

    async def _warm_models(self) -> None:
        """Load every served model's base and current adapter once, ahead of the first request."""
        served = self.daemon.served
        assert served is not None
        for model in await anyio.to_thread.run_sync(self.catalog.models):
            await served.warm(model)

    @staticmethod
    async def _serve(
        app: web.Application,
        make_site: Callable[[web.AppRunner], web.BaseSite],
        where: str,
        runners: list[web.AppRunner],
        limits: ServerLimits,
    ) -> web.AppRunner:
        runner = await setup_runner(app, limits, where=where, shutdown_timeout_s=HTTP_SHUTDOWN_TIMEOUT_S)
        runners.append(runner)
        try:
            await make_site(runner).start()
        except OSError as exc:
            raise ServiceError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        return runner

    async def _announce_stopping(self) -> None:
        await self.stop.wait()
        sd_notify.notify("STOPPING=1", "STATUS=draining")
