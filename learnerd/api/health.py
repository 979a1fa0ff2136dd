"""``GET /healthz`` and ``GET /readyz`` on the TCP listeners, for load balancers and Kubernetes probes.

``/healthz`` answers 200 ``{"status": "ok"}`` while the process serves HTTP at all (liveness).
``/readyz`` answers 200 ``{"status": "ready"}`` once start-up is over (every controller runs, the embedder
has loaded) and no served model is broken; 503 ``{"status": "starting" | "draining"}`` before and after,
and 503 ``{"status": "unready", "reason": ...}`` while a served model's last load failed its known-answer
check (:meth:`learnerd.ml.serving.ServedModels.unready_reason`; it is loaded again in the background
until a load passes). Neither needs a token.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from learnerd.api.http import json_response

#: Paths answered without authentication.
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})


def health_routes(state: Callable[[], str], unready_reason: Callable[[], str | None]) -> list[web.RouteDef]:
    """The two routes; ``state()`` is the daemon's ``starting`` / ``running`` / ``draining``, and
    ``unready_reason()`` why a running daemon is not ready (None: it is)."""

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        now = state()
        if now != "running":
            return json_response({"status": now}, status=503)
        reason = unready_reason()
        if reason is not None:
            return json_response({"status": "unready", "reason": reason}, status=503)
        return json_response({"status": "ready"})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
