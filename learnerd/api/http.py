"""HTTP plumbing shared by the admin socket, the TCP endpoints and the RPC server (aiohttp).

* :func:`error_middleware` is the one place that turns a per-request failure into an answer, JSON
  ``{"error": "message"}``: a :class:`~learnerd.api.errors.ControlError` with its status (400, 401,
  404, 408, 409, 413, 429 with ``Retry-After``, 503), aiohttp's own HTTP errors (404, 405, 413 …) with
  theirs, a body the client could not deliver with 400, anything else with 500 (a bug of ours: logged
  with its traceback, at most once per 10 s, :mod:`learnerd.runtime.log_throttle`);
* :func:`read_body` / :func:`read_json` read a body within a size cap (413) and a deadline (408), and
  parse it with :func:`learnerd.api.json_body.parse_json_body` (400 for nesting, huge numbers,
  lone surrogates) through :func:`parse_json`: a body over :data:`INLINE_PARSE_BYTES` is parsed in a worker
  thread, one such body at a time in the process, so a flood of large bodies (refused or not) never holds
  the event loop that answers every other request; :func:`bearer_matches` compares a bearer token on the
  header's raw bytes, so a non-UTF-8 byte is a wrong token (401), never an error;
* :func:`setup_runner` serves an app with :class:`ServerLimits`: aiohttp's ``keepalive_timeout`` closes
  idle connections and those that do not finish their headers in time, and a connection cap per
  listener closes the oldest connection when a new one would pass it (so idle or slow clients cannot
  exhaust the process's file descriptors);
* :func:`access_log_middleware` logs one structlog event per request (method, path, status,
  ``duration_s`` and whatever the app's ``peer`` function adds), at info for requests that change
  something and at debug for reads, searches and scrapes (a Prometheus scrape every 15 s is not news);
  refusals (4xx, 5xx) at info, at most once per 10 s per status with the count of those not logged;
* :func:`metrics_handler` serves ``GET /metrics`` on both (``POST /search`` is :mod:`learnerd.api.search`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import resource
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from learnerd.api.errors import BadRequest, ControlError, PayloadTooLarge, RequestTimeout
from learnerd.api.json_body import parse_json_body
from learnerd.runtime.log_throttle import LogThrottle

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_QUIET_PATHS = ("/metrics", "/search")
#: The app key of the app's :class:`LogThrottle` (one per app, so one listener's flood does not hide another's).
THROTTLE = web.AppKey("learnerd.log_throttle", LogThrottle)
_FALLBACK_THROTTLE = LogThrottle()


def throttle_of(request: web.Request) -> LogThrottle:
    """The log throttle of ``request``'s app."""
    return request.app.get(THROTTLE) or _FALLBACK_THROTTLE


#: File descriptors kept free of connections (database, journal, logs, model files, training pipes).
FD_RESERVE = 256
#: Listeners one process serves at most (admin socket, metrics, search, RPC, OpenAI): the fd budget's divisor.
MAX_LISTENERS = 5


@dataclass(frozen=True)
class ServerLimits:
    """Limits on what one client may hold of a listener (seconds, connections).

    ``keepalive_timeout_s``: aiohttp's ``keepalive_timeout``: an idle connection, or one whose request
    headers have not all arrived this long after it opened (or after its last answer), is closed.
    ``body_timeout_s``: a request body must arrive within this (else 408). ``max_connections``: per
    listener; a new connection past it closes the oldest one (see :class:`LimitedRunner`), and it is
    lowered to fit the process's file-descriptor limit (:func:`connection_budget`).
    """

    keepalive_timeout_s: float = 15.0
    body_timeout_s: float = 15.0
    max_connections: int = 1000


def connection_budget(requested: int) -> int:
    """``requested``, lowered so :data:`MAX_LISTENERS` full listeners and :data:`FD_RESERVE` descriptors
    fit under the soft ``RLIMIT_NOFILE`` (never below 16 for that reason)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return requested
    return min(requested, max(16, (soft - FD_RESERVE) // MAX_LISTENERS))


class _CappedFactory:
    """The protocol factory handed to the listening socket: aiohttp's server, with the connection cap."""

    def __init__(self, server: web.Server, runner: LimitedRunner) -> None:
        self._server = server
        self._runner = runner

    def __call__(self) -> RequestHandler:
        connections = self._server.connections
        if len(connections) >= self._runner.max_connections:
            self._runner.evict(connections)
        return self._server()


#: The app key of the connections whose request is in a handler (:class:`LimitedRunner` never evicts them).
BUSY = web.AppKey("learnerd.busy_connections", set)


@web.middleware
async def _track_busy(request: web.Request, handler: Handler) -> web.StreamResponse:
    busy = request.app[BUSY]
    busy.add(request.protocol)
    try:
        return await handler(request)
    finally:
        busy.discard(request.protocol)


class LimitedRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose listeners hold at most ``max_connections`` connections.

    A new connection past the cap closes the oldest connection that has no request in a handler: one
    that is idle between requests or still sending its headers (slow clients). Connections whose request
    is being handled are left alone (their body has :class:`ServerLimits`' deadline); were they all busy,
    the cap is passed rather than an answer cut. Keyword arguments go to aiohttp (``keepalive_timeout`` …).
    """

    def __init__(self, app: web.Application, *, max_connections: int, where: str = "", **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.max_connections = max_connections
        self.where = where
        self.evicted = 0
        self.throttle = app.get(THROTTLE) or LogThrottle()
        if not app.frozen:
            app[BUSY] = set()
            app.middlewares.insert(0, _track_busy)
        self._busy = app[BUSY]

    @property
    def server(self) -> Any:
        server = super().server
        return None if server is None else _CappedFactory(server, self)

    def evict(self, connections: list[RequestHandler]) -> None:
        """Close the oldest of ``connections`` that has no request being handled (see the class docstring)."""
        victim = next((h for h in connections if h.transport is not None and h not in self._busy), None)
        if victim is None:
            return
        victim.force_close()
        self.evicted += 1
        self.throttle.warning(
            "connection-cap",
            "connection cap reached; closed the oldest idle connection",
            listener=self.where,
            max_connections=self.max_connections,
            evicted=self.evicted,
        )


async def setup_runner(
    app: web.Application, limits: ServerLimits, *, where: str, shutdown_timeout_s: float
) -> LimitedRunner:
    """``app`` set up to serve under ``limits`` (``where`` names the listener in the log); start its site
    (``web.TCPSite(runner, …)``, ``web.SockSite``) and ``cleanup()`` the runner afterwards."""
    if not app.frozen:  # an app served again keeps its first settings
        app[BODY_TIMEOUT] = limits.body_timeout_s
        app[THROTTLE] = LogThrottle()
    runner = LimitedRunner(
        app,
        max_connections=connection_budget(limits.max_connections),
        where=where,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout_s,
        keepalive_timeout=limits.keepalive_timeout_s,
    )
    await runner.setup()
    return runner


#: The app key holding the app's body deadline (seconds; :class:`ServerLimits`).
BODY_TIMEOUT = web.AppKey("learnerd.body_timeout_s", float)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, ensure_ascii=False))


def error_response(status: int, message: str, headers: dict[str, str] | None = None, **fields: Any) -> web.Response:
    response = json_response({"error": message, **fields}, status=status)
    if headers:
        response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ControlError as exc:
        return error_response(exc.status, str(exc), exc.headers, **exc.fields)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason)
    except RequestPayloadError as exc:
        return error_response(400, f"the body could not be read: {exc}")
    except Exception:
        throttle_of(request).exception("request-failed", "request failed", method=request.method, path=request.path)
        return error_response(500, "internal error; see the daemon's log")


def bearer_matches(request: web.Request, expected: bytes) -> bool:
    """Whether ``Authorization`` is ``Bearer <expected>`` (the scheme in any case), compared in constant
    time (:func:`hmac.compare_digest`) on the header's raw bytes: a byte that is not UTF-8 only makes
    the token wrong."""
    header = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    scheme, _, presented = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(presented.strip(), expected)


def access_log_middleware(event: str, peer: Callable[[web.Request], dict[str, Any]]) -> Any:
    """A middleware logging ``event`` once per request, with ``peer(request)``'s fields."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            quiet = request.method in ("GET", "HEAD") or request.path in _QUIET_PATHS
            fields = {
                "method": request.method,
                "path": request.path,
                "status": status,
                "duration_s": round(time.perf_counter() - started, 6),
                **peer(request),
            }
            if status < 400:
                (log.debug if quiet else log.info)(event, **fields)
            else:
                throttle_of(request).info(f"{event}:{status}", event, **fields)

    return middleware


async def read_body(request: web.Request, max_bytes: int | None = None) -> bytes:
    """The request's body, at most ``max_bytes`` (default: the app's ``client_max_size``), read within
    the app's body deadline (:class:`ServerLimits`; 15 s when it has none).

    Raises:
        PayloadTooLarge: a declared ``Content-Length`` over the cap (refused before reading), or a body
            passing it (the rest is not read). RequestTimeout: the body did not arrive in time.
    """
    limit = request.client_max_size if max_bytes is None else max_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"Payload Too Large: the body exceeds {limit} bytes")
    body = bytearray()
    with anyio.move_on_after(request.app.get(BODY_TIMEOUT, ServerLimits.body_timeout_s)) as scope:
        while chunk := await request.content.read(limit + 1 - len(body)):
            body += chunk
            if len(body) > limit:
                raise PayloadTooLarge(f"Payload Too Large: the body exceeds {limit} bytes")
    if scope.cancelled_caught:
        raise RequestTimeout("the body did not arrive in time")
    return bytes(body)


INLINE_PARSE_BYTES = 64 * 1024
"""Bodies up to this size (bytes) are parsed on the event loop (well under a millisecond); larger ones off it."""
_BIG_BODY_PARSERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def big_body_parser() -> anyio.CapacityLimiter:
    """The one worker thread's worth of capacity (per event loop) that bodies over :data:`INLINE_PARSE_BYTES`
    are parsed with: a flood of them waits there, costs one core at most, and leaves the loop free."""
    loop = asyncio.get_running_loop()
    limiter = _BIG_BODY_PARSERS.get(loop)
    if limiter is None:
        limiter = _BIG_BODY_PARSERS[loop] = anyio.CapacityLimiter(1)
    return limiter


async def parse_json(raw: bytes) -> Any:
    """:func:`~learnerd.api.json_body.parse_json_body` of ``raw``, off the event loop when ``raw`` is over
    :data:`INLINE_PARSE_BYTES` (in a worker thread under :func:`big_body_parser`).

    Raises:
        BadRequest: see :func:`~learnerd.api.json_body.parse_json_body`.
    """
    if len(raw) <= INLINE_PARSE_BYTES:
        return parse_json_body(raw)
    return await anyio.to_thread.run_sync(parse_json_body, raw, limiter=big_body_parser())


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body (:func:`read_body`, :func:`parse_json`); an empty body is ``{}``.

    Raises:
        BadRequest: not a JSON object, or a hostile one. PayloadTooLarge, RequestTimeout: see :func:`read_body`.
    """
    if not request.body_exists:
        return {}
    raw = await read_body(request)
    if not raw.strip():
        return {}
    body = await parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    """``body[name]`` checked to be a ``kind`` (an int is accepted for a float).

    Raises:
        BadRequest: missing without a default, or of another type.
    """
    if name not in body or body[name] is None:
        if default is ...:
            raise BadRequest(f"missing field {name!r}")
        return default
    value = body[name]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be {kind.__name__}, not {type(value).__name__}")
    return value


def metrics_handler(registry: CollectorRegistry) -> Handler:
    """``GET /metrics``: ``registry`` in Prometheus text format (OpenMetrics when the scraper asks)."""

    async def handle(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    return handle
