"""HTTP plumbing shared by the admin socket and the TCP endpoints (aiohttp).

* :func:`error_middleware` answers every failure as JSON ``{"error": "message"}``: a
  :class:`~learnerd.api.errors.ControlError` with its status (400, 404, 409, 503), aiohttp's own
  HTTP errors (404, 405, 413 …) with theirs, anything else with 500 (logged with its traceback);
* :func:`access_log_middleware` logs one structlog event per request (method, path, status,
  ``duration_s`` and whatever the app's ``peer`` function adds), at info for requests that change
  something and at debug for reads, searches and scrapes (a Prometheus scrape every 15 s is not news);
* :func:`metrics_handler` serves ``GET /metrics`` on both (``POST /search`` is :mod:`learnerd.api.search`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from learnerd.api.errors import BadRequest, Conflict, ControlError, NotFound, Unavailable

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS = {BadRequest: 400, NotFound: 404, Conflict: 409, Unavailable: 503}
_QUIET_PATHS = ("/metrics", "/search")


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, ensure_ascii=False))


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = json_response({"error": message}, status=status)
    if headers:
        response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ControlError as exc:
        return error_response(_STATUS.get(type(exc), 400), str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason)
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return error_response(500, "internal error; see the daemon's log")


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
            (log.debug if quiet and status < 400 else log.info)(
                event,
                method=request.method,
                path=request.path,
                status=status,
                duration_s=round(time.perf_counter() - started, 6),
                **peer(request),
            )

    return middleware


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body; an empty body is ``{}``.

    Raises:
        BadRequest: not a JSON object. web.HTTPRequestEntityTooLarge: over the app's ``client_max_size``.
    """
    if not request.body_exists:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
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
