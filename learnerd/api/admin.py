"""The admin API: HTTP with JSON bodies on the Unix socket ``<state_dir>/learnerd.sock``.

Only the daemon's own user and root are served: every request's connection is checked with
``SO_PEERCRED`` (:mod:`learnerd.api.peercred`); anyone else gets 403 and a warning in the log
(one per 10 s at most, with the count of those not logged).
(The socket is 0600 in a 0700 directory, so the file system already keeps others out; the check
holds even where those modes were loosened.)

=======  =============  ==========================================  =========================================
method   path           body                                        answer
=======  =============  ==========================================  =========================================
GET      /status                                                    the status object (docs/operations.md)
POST     /pause         ``{"controller": str}`` (omit: all)         ``{"paused": {controller: bool}}``
POST     /resume        ``{"controller": str}`` (omit: all)         ``{"paused": {controller: bool}}``
POST     /requeue       ``{"controller": str, "key": str}``         ``{"controller", "key", "queue_depth"}``
POST     /backfill      ``{"since": epoch seconds}``                the job (202): ``{id, since, blocks,
                                                                    state, started_at, finished_at, done,
                                                                    changes}``
GET      /backfill                                                  the latest job, or null
POST     /drain                                                     ``{"state": "draining",
                                                                    "drain_timeout_s"}`` (202)
POST     /reload                                                    ``{config_path, changed, applied,
                                                                    needs_restart, log_level}``
GET      /log-level                                                 ``{"level"}``
POST     /log-level     ``{"level": str}``                          ``{"level", "previous"}``
GET      /metrics                                                   Prometheus text format
POST     /search        ``{"text": str, "k": int = 3}``             ``[{id, query, answer, language, score}]``
POST     /forget        ``{"kind": "example"|"block"|"source"|      the forget report: ``{dry_run, tombstone,
                        "match", "value": str, "dry_run": bool}``   examples, vectors, documents,
                                                                    export_files, retrain, errors}``
GET      /tombstones                                                ``[{id, kind, value, block_ids,
                                                                    created_at}]``
POST     /unforget      ``{"id": str}``                             the removed tombstone
=======  =============  ==========================================  =========================================

Errors are ``{"error": "message"}`` with 400 (bad body: also too deeply nested, a huge number, a lone
surrogate; :mod:`learnerd.api.json_body`), 403 (not allowed), 404 (unknown controller, requeue key,
forget id, tombstone or path), 408 (body
too slow), 409 (draining, starting, a backfill running, no config file), 413 (body too large), 429
(too many searches queued; ``Retry-After``) or 503 (the embedder is still loading).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from learnerd.api.http import (
    Handler,
    access_log_middleware,
    error_middleware,
    error_response,
    field,
    json_response,
    metrics_handler,
    read_json,
    throttle_of,
)
from learnerd.api.peercred import PeerCred, is_allowed, peer_cred
from learnerd.api.search import search_handler
from learnerd.api.surface import ControlSurface

_PEER = web.RequestKey[PeerCred | None]("learnerd.peer")


def _peer(request: web.Request) -> PeerCred | None:
    """The connection's credentials (None when they cannot be read: refused), read once per request."""
    if _PEER not in request:
        sock = request.transport.get_extra_info("socket") if request.transport is not None else None
        try:
            request[_PEER] = peer_cred(sock) if sock is not None else None
        except OSError:
            request[_PEER] = None
    return request[_PEER]


def _peer_fields(request: web.Request) -> dict[str, Any]:
    peer = _peer(request)
    return {"peer_uid": peer.uid, "peer_pid": peer.pid} if peer is not None else {"peer_uid": None}


@web.middleware
async def peer_check_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    peer = _peer(request)
    if peer is None or not is_allowed(peer.uid):
        throttle_of(request).warning(
            "refused",
            "admin request refused: peer is not this user or root",
            peer_uid=getattr(peer, "uid", None),
            peer_pid=getattr(peer, "pid", None),
            path=request.path,
        )
        return error_response(403, "forbidden: the admin socket serves only the daemon's user and root")
    return await handler(request)


def admin_app(control: ControlSurface, registry: CollectorRegistry, max_body_bytes: int) -> web.Application:
    """The admin API's aiohttp application (serve it on the socket from :mod:`learnerd.api.unix_socket`)."""

    async def status(request: web.Request) -> web.Response:
        return json_response(control.status())

    async def pause(request: web.Request) -> web.Response:
        return json_response(control.pause(field(await read_json(request), "controller", str, None)))

    async def resume(request: web.Request) -> web.Response:
        return json_response(control.resume(field(await read_json(request), "controller", str, None)))

    async def requeue(request: web.Request) -> web.Response:
        body = await read_json(request)
        return json_response(control.requeue(field(body, "controller", str), field(body, "key", str)))

    async def start_backfill(request: web.Request) -> web.Response:
        return json_response(control.start_backfill(field(await read_json(request), "since", float)), status=202)

    async def backfill_status(request: web.Request) -> web.Response:
        return json_response(control.backfill_status())

    async def drain(request: web.Request) -> web.Response:
        return json_response(control.drain(), status=202)

    async def reload(request: web.Request) -> web.Response:
        return json_response(control.reload())

    async def get_log_level(request: web.Request) -> web.Response:
        return json_response(control.log_level())

    async def set_log_level(request: web.Request) -> web.Response:
        return json_response(control.set_log_level(field(await read_json(request), "level", str)))

    async def forget(request: web.Request) -> web.Response:
        body = await read_json(request)
        kind, value = field(body, "kind", str), field(body, "value", str)
        return json_response(await control.forget(kind, value, field(body, "dry_run", bool, False)))

    async def tombstones(request: web.Request) -> web.Response:
        return json_response(control.tombstones())

    async def remove_tombstone(request: web.Request) -> web.Response:
        return json_response(control.remove_tombstone(field(await read_json(request), "id", str)))

    app = web.Application(
        client_max_size=max_body_bytes,
        middlewares=[access_log_middleware("admin request", _peer_fields), error_middleware, peer_check_middleware],
    )
    app.router.add_get("/status", status)
    app.router.add_post("/pause", pause)
    app.router.add_post("/resume", resume)
    app.router.add_post("/requeue", requeue)
    app.router.add_post("/backfill", start_backfill)
    app.router.add_get("/backfill", backfill_status)
    app.router.add_post("/drain", drain)
    app.router.add_post("/reload", reload)
    app.router.add_get("/log-level", get_log_level)
    app.router.add_post("/log-level", set_log_level)
    app.router.add_get("/metrics", metrics_handler(registry))
    app.router.add_post("/search", search_handler(control))
    app.router.add_post("/forget", forget)
    app.router.add_get("/tombstones", tombstones)
    app.router.add_post("/unforget", remove_tombstone)
    return app
