"""``GET /healthz`` and ``GET /readyz`` on the TCP listeners, for load balancers and Kubernetes probes.

``/healthz`` answers 200 ``{"status": "ok"}`` while the process serves HTTP at all (liveness).
``/readyz`` answers 200 ``{"status": "ready"}`` once start-up is over (every controller runs, the embedder
has loaded) and 503 ``{"status": "starting" | "draining"}`` otherwise (readiness). Neither needs a token.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from learnerd.api.http import json_response

#: Paths answered without authentication.
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})


def health_routes(state: Callable[[], str]) -> list[web.RouteDef]:
    """The two routes; ``state()`` is the daemon's ``starting`` / ``running`` / ``draining``."""

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        now = state()
        if now == "running":
            return json_response({"status": "ready"})
        return json_response({"status": now}, status=503)

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
