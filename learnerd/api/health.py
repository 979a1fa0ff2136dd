"""``GET /healthz`` and ``GET /readyz`` on the TCP listeners, for load balancers and Kubernetes probes.

``/healthz`` answers 200 ``{"status": "ok"}`` while the process serves HTTP at all (liveness).
``/readyz`` answers 200 ``{"status": "ready"}`` once start-up is over (every controller runs, the embedder
has loaded) and no served model is broken; 503 ``{"status": "starting" | "draining", "reason": ...}`` before
and after, and 503 ``{"status": "unready", "reason": ...}`` while a served model's last load failed its
known-answer check (:meth:`learnerd.ml.serving.ServedModels.unready_reason`; it is loaded again in the
background until a load passes) or, on the OpenAI-compatible endpoint, while a base model is loading. The
``reason`` names the part that is not ready. Neither needs a token.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from learnerd.api.http import json_response

#: Paths answered without authentication.
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
#: What is not ready in each daemon state but ``running``.
STATE_REASONS = {
    "starting": "the daemon is starting: the embedder loads, then the controllers start",
    "draining": "the daemon is draining: it finishes its work in flight and exits",
}


def health_routes(state: Callable[[], str], unready_reason: Callable[[], str | None]) -> list[web.RouteDef]:
    """The two routes; ``state()`` is the daemon's ``starting`` / ``running`` / ``draining``, and
    ``unready_reason()`` why a running daemon is not ready (None: it is)."""

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        now = state()
        if now != "running":
            return json_response({"status": now, "reason": STATE_REASONS.get(now, now)}, status=503)
        reason = unready_reason()
        if reason is not None:
            return json_response({"status": "unready", "reason": reason}, status=503)
        return json_response({"status": "ready"})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
