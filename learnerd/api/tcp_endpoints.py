"""The optional TCP endpoints: ``GET /metrics`` for Prometheus (``--metrics-addr``) and ``POST /search``
for assistants (``--listen-search``, behind a bearer token).

The search endpoint wants ``Authorization: Bearer <token>`` with the token from ``$LEARNERD_SEARCH_TOKEN``,
else the token file (:mod:`learnerd.api.tokens`), compared in constant time (:func:`hmac.compare_digest`); anything
else gets 401 and a warning in the log (one per 10 s at most). Bodies over ``[admin] max_body_bytes`` get 413. It
is plain HTTP: bind it to 127.0.0.1, or put a TLS-terminating proxy in front of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from learnerd.api.health import HEALTH_PATHS, health_routes
from learnerd.api.http import (
    Handler,
    access_log_middleware,
    bearer_matches,
    error_middleware,
    error_response,
    metrics_handler,
    throttle_of,
)
from learnerd.api.search import search_handler
from learnerd.api.surface import ControlSurface

#: The environment variable holding the search endpoint's bearer token (overrides the token file's).
SEARCH_TOKEN_ENV = "LEARNERD_SEARCH_TOKEN"


def _remote(request: web.Request) -> dict[str, Any]:
    return {"remote": request.remote}


def _unauthorized() -> web.Response:
    return error_response(401, "unauthorized", headers={"WWW-Authenticate": 'Bearer realm="learnerd"'})


def bearer_middleware(token: str, refuse: Callable[[], web.Response] = _unauthorized, what: str = "search") -> Any:
    """Refuse (``refuse()``, a 401) every request whose ``Authorization`` is not ``Bearer <token>`` (one
    warning per 10 s, naming the endpoint, ``what``)."""
    expected = token.encode()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in HEALTH_PATHS:
            return await handler(request)
        if not bearer_matches(request, expected):
            throttle_of(request).warning(
                "refused", f"{what} request refused: missing or wrong bearer token", remote=request.remote
            )
            return refuse()
        return await handler(request)

    return middleware


def search_app(control: ControlSurface, token: str, max_body_bytes: int) -> web.Application:
    """``POST /search`` behind the bearer token (:mod:`learnerd.api.search`), and the health probes
    (:mod:`learnerd.api.health`, no token)."""
    app = web.Application(
        client_max_size=max_body_bytes,
        middlewares=[access_log_middleware("search request", _remote), error_middleware, bearer_middleware(token)],
    )
    app.router.add_post("/search", search_handler(control))
    app.add_routes(health_routes(lambda: control.state, control.unready_reason))
    return app


def metrics_app(
    registry: CollectorRegistry, state: Callable[[], str], unready_reason: Callable[[], str | None]
) -> web.Application:
    """``GET /metrics`` (the daemon's one registry) and the health probes (``state()``: the daemon's state;
    ``unready_reason()``: why a running daemon is not ready, see :mod:`learnerd.api.health`)."""
    app = web.Application(middlewares=[access_log_middleware("metrics request", _remote), error_middleware])
    app.router.add_get("/metrics", metrics_handler(registry))
    app.add_routes(health_routes(state, unready_reason))
    return app
