"""The probe-injection RPC server (``learnerd run --listen-rpc HOST:PORT``): dlm's ``inject_probe``.

The contract is dlm's (``src/dlm/train/rpc.py``), so sway's push sink talks to learnerd unchanged::

    POST /rpc
    Authorization: Bearer <token>           # the token is $LEARNERD_PROBE_TOKEN (dlm: $DLM_PROBE_TOKEN)
    Content-Type: application/json
    {"method": "inject_probe", "params": {"prompt": "...", "reference": "...", "tags": ["..."]}}

Answers (JSON bodies; every error is ``{"error": "<reason>"}``), checked in this order:

* **404** — any path but ``/rpc`` (and **405** for ``/rpc`` with a method other than POST);
* **401** — the ``Authorization`` header is missing, not ``Bearer``, or the token is wrong (compared
  with :func:`hmac.compare_digest`, in constant time for a token of the right length);
* **413** — the body is larger than 64 KiB (65,536 bytes: a declared ``Content-Length`` is refused
  before reading, a chunked body as soon as it passes the cap);
* **400** — an empty body, not JSON, not an object, ``params`` not an object, ``prompt`` or
  ``reference`` not a non-empty string, ``tags`` not a list of strings, or a pair that a ``### Q`` /
  ``### A`` section cannot carry exactly (see ``learnerd.store.dlm.probe_section``; dlm would mangle it);
* **404** — ``method`` is not ``inject_probe``;
* **429** — the inbox is full: ``{"error": ..., "queue_depth": n}``;
* **503** — the daemon is stopping or the journal write failed (not accepted; retry later);
* **200** — ``{"accepted": true, "next_cycle_eta_s": <int seconds>, "queue_depth": <int>}``, sent only
  after the probe is fsynced in the journal.

Differences from dlm, all additive: 413 instead of dlm's 400 for an oversized body; the answer comes
after an fsync (dlm's queue lives in memory); ``next_cycle_eta_s`` is an estimate
(:mod:`learnerd.sources.cycle_eta`; dlm always sends 0); ``queue_depth`` counts probes not yet written
into the document (accepted ones included). Every probe goes to one document, the daemon's
``[rpc] document`` — a client cannot choose a file to write.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import structlog
from aiohttp import web

from learnerd.config import RPC_TOKEN_ENV
from learnerd.sources.probe_inbox import InboxClosed, InboxFull, ProbeInbox
from learnerd.store.dlm import UnrepresentableError, probe_section
from learnerd.store.probe_journal import InjectedProbe

log = structlog.get_logger(__name__)

RPC_PATH = "/rpc"
METHOD_INJECT_PROBE = "inject_probe"
MAX_BODY_BYTES = 64 * 1024
SHUTDOWN_TIMEOUT_S = 5.0
"""At shutdown, requests in flight get this long to finish (seconds)."""


class RpcServer:
    """Serves ``POST /rpc`` on ``host:port`` (port 0: a free one; see :attr:`port`).

    Args:
        inbox: where accepted probes go (its committer must be running).
        token: the bearer token clients must present; non-empty.
        document: the absolute path of the document injected probes are written into.
        eta: seconds until the next cycle of a document has finished (``next_cycle_eta_s``).

    Raises:
        ValueError: an empty token.
    """

    def __init__(
        self,
        inbox: ProbeInbox,
        *,
        token: str,
        document: str,
        eta: Callable[[str], float],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not token:
            raise ValueError(f"the RPC server needs a bearer token; set {RPC_TOKEN_ENV}")
        self._inbox = inbox
        self._token = token.encode("utf-8")
        self._document = document
        self._eta = eta
        self.host = host
        self.port = port
        self.app = web.Application()
        self.app.router.add_post(RPC_PATH, self._handle)
        self.app.router.add_route("*", "/{tail:.*}", self._not_found)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; reports started once the socket is bound (then :attr:`port` is real).

        Raises:
            OSError: the address cannot be bound.
        """
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            self.port = runner.addresses[0][1]
            log.info("rpc listening", host=self.host, port=self.port, document=self._document)
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()

    async def _not_found(self, request: web.Request) -> web.Response:
        if request.path == RPC_PATH:
            return _error(405, f"{request.method} not allowed; use POST", headers={"Allow": "POST"})
        return _error(404, f"unknown path {request.path}")

    async def _handle(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("Authorization", "")):
            return _error(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return _error(413, f"body exceeds {MAX_BODY_BYTES} bytes")
        body = await _read_capped(request)
        if body is None:
            return _error(413, f"body exceeds {MAX_BODY_BYTES} bytes")
        parsed = _parse(body)
        if isinstance(parsed, web.Response):
            return parsed
        prompt, reference, tags = parsed
        probe = InjectedProbe(
            id=InjectedProbe.new_id(),
            document=self._document,
            prompt=prompt,
            reference=reference,
            tags=tags,
            source_addr=request.remote or "",
            accepted_at=time.time(),
        )
        try:
            probe_section(prompt, reference, source=probe.harvest_source)
        except UnrepresentableError as exc:
            return _error(400, f"the probe cannot be written as a ### Q / ### A section: {exc}")
        try:
            depth = await self._inbox.submit(probe)
        except InboxFull as exc:
            return _error(429, str(exc), queue_depth=self._inbox.depth)
        except (InboxClosed, OSError) as exc:
            return _error(503, f"probe not accepted: {exc}")
        eta = self._eta(self._document)
        log.debug("rpc.probe_accepted", probe_id=probe.id, tags=list(tags), queue_depth=depth)
        return web.json_response({"accepted": True, "next_cycle_eta_s": math.ceil(eta), "queue_depth": depth})

    def _authorized(self, header: str) -> bool:
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode("utf-8"), self._token)


async def _read_capped(request: web.Request) -> bytes | None:
    """The body, or None once it passes :data:`MAX_BODY_BYTES` (the rest is not read)."""
    body = bytearray()
    while chunk := await request.content.read(MAX_BODY_BYTES + 1 - len(body)):
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def _parse(body: bytes) -> tuple[str, str, tuple[str, ...]] | web.Response:
    """``(prompt, reference, tags)`` of an ``inject_probe`` request, or the error response (400 / 404)."""
    if not body:
        return _error(400, "empty body")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"malformed JSON: {exc}")
    if not isinstance(payload, dict):
        return _error(400, "payload must be a JSON object")
    method = payload.get("method")
    if method != METHOD_INJECT_PROBE:
        return _error(404, f"unknown method {method!r}")
    params = payload.get("params", {})
    if not isinstance(params, dict):
        return _error(400, "`params` must be an object")
    prompt, reference, tags = params.get("prompt"), params.get("reference"), params.get("tags", [])
    if not isinstance(prompt, str) or not prompt.strip():
        return _error(400, "`params.prompt` must be a non-empty string")
    if not isinstance(reference, str) or not reference.strip():
        return _error(400, "`params.reference` must be a non-empty string")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return _error(400, "`params.tags` must be a list of strings")
    return prompt.strip(), reference.strip(), tuple(tags)


def _error(status: int, message: str, *, headers: dict[str, str] | None = None, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status, headers=headers)
