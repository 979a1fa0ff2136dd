"""The optional TCP endpoints: ``GET /metrics`` for Prometheus (``--metrics-addr``) and ``POST /search``
for assistants (``--listen-search``, behind a bearer token).

The search endpoint wants ``Authorization: Bearer <token>`` with the token from
``$LEARNERD_SEARCH_TOKEN`` (compared in constant time, :func:`hmac.compare_digest`); anything else
gets 401 and one warning in the log. Bodies over ``[admin] max_body_bytes`` get 413. It is plain
HTTP: bind it to 127.0.0.1, or put a TLS-terminating proxy in front of it.
"""

from __future__ import annotations

import hmac
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from learnerd.api.http import (
    Handler,
    access_log_middleware,
    error_middleware,
    error_response,
    metrics_handler,
)
from learnerd.api.search import search_handler
from learnerd.api.surface import ControlSurface

log = structlog.get_logger(__name__)

#: The environment variable holding the search endpoint's bearer token.
SEARCH_TOKEN_ENV = "LEARNERD_SEARCH_TOKEN"
#: The shortest token accepted (a guessable token would defeat the point).
MIN_TOKEN_CHARS = 16


class TokenError(ValueError):
    """The search token is missing or too short."""


def check_token(token: str | None) -> str:
    """``token`` if usable.

    Raises:
        TokenError: unset, empty, or shorter than :data:`MIN_TOKEN_CHARS`.
    """
    if not token:
        raise TokenError(f"serving search over TCP needs a bearer token in ${SEARCH_TOKEN_ENV}")
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"${SEARCH_TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters long")
    return token


def _remote(request: web.Request) -> dict[str, Any]:
    return {"remote": request.remote}


def bearer_middleware(token: str) -> Any:
    """Refuse (401) every request whose ``Authorization`` is not ``Bearer <token>``."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            log.warning("search request refused: missing or wrong bearer token", remote=request.remote)
            return error_response(401, "unauthorized", headers={"WWW-Authenticate": 'Bearer realm="learnerd"'})
        return await handler(request)

    return middleware


def search_app(control: ControlSurface, token: str, max_body_bytes: int) -> web.Application:
    """``POST /search`` only, behind the bearer token (see :func:`learnerd.api.http.search_handler`)."""
    app = web.Application(
        client_max_size=max_body_bytes,
        middlewares=[access_log_middleware("search request", _remote), bearer_middleware(token), error_middleware],
    )
    app.router.add_post("/search", search_handler(control))
    return app


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """``GET /metrics`` only: the daemon's one registry."""
    app = web.Application(middlewares=[access_log_middleware("metrics request", _remote), error_middleware])
    app.router.add_get("/metrics", metrics_handler(registry))
    return app
