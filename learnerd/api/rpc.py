"""The RPC server (``learnerd run --listen-rpc HOST:PORT``): dlm's ``inject_probe``, and ``POST /v1/blocks``.

``POST /v1/blocks`` (block-log events over HTTP, behind the same bearer token, the same 64 KiB cap and the
same body deadline) is :mod:`learnerd.api.blocks`; the rest of this docstring is ``inject_probe``.

The contract is dlm's (``src/dlm/train/rpc.py``), so sway's push sink talks to learnerd unchanged::

    POST /rpc
    Authorization: Bearer <token>           # the token is $LEARNERD_PROBE_TOKEN (dlm: $DLM_PROBE_TOKEN)
    Content-Type: application/json
    {"method": "inject_probe", "params": {"prompt": "...", "reference": "...", "tags": ["..."]}}

Answers (JSON bodies; every error is ``{"error": "<reason>"}``), checked in this order:

* **404** — any path but ``/rpc`` and ``/v1/blocks`` (and **405** for those with a method other than POST);
* **401** — the ``Authorization`` header is missing, not ``Bearer``, or the token is wrong (compared
  with :func:`hmac.compare_digest` on the header's bytes, in constant time for a token of the right
  length; a byte that is not UTF-8 is a wrong token);
* **413** — the body is larger than 64 KiB (65,536 bytes: a declared ``Content-Length`` is refused
  before reading, a chunked body as soon as it passes the cap);
* **408** — the body did not arrive within the body deadline (``ServerLimits.body_timeout_s``);
* **400** — an empty body, not JSON (or hostile JSON: nested deeper than 32 levels, an integer of more
  than 20 digits, a non-finite number, a lone UTF-16 surrogate; :mod:`learnerd.api.json_body`), not an
  object, ``params`` not an object, ``prompt`` or ``reference`` not a non-empty string, ``tags`` not a
  list of strings, or a pair that a ``### Q`` / ``### A`` section cannot carry exactly (see
  ``learnerd.store.dlm.probe_section``; dlm would mangle it). Each probe is checked and encoded alone
  before it joins a group commit, so a bad one is refused alone;
* **404** — ``method`` is not ``inject_probe``;
* **429** — the inbox is full: ``{"error": ..., "queue_depth": n}`` with ``Retry-After``;
* **503** — the daemon is stopping or the journal write failed (not accepted; retry later);
* **200** — ``{"accepted": true, "next_cycle_eta_s": <int seconds>, "queue_depth": <int>}``, sent only
  after the probe is fsynced in the journal.

The prompt and the reference pass the one screen of every intake (:mod:`learnerd.privacy.screen`) before the
probe is journaled: a secret never reaches the journal, the document or an adapter, only its typed placeholder;
a probe whose reference is a destructive command, or whose prompt or reference reads as instructions to the
model, is refused with **400** (``{"error": "refused by the privacy policy: <reason>"}``) and never journaled.

Differences from dlm, all additive: 413 instead of dlm's 400 for an oversized body; the answer comes
after an fsync (dlm's queue lives in memory); ``next_cycle_eta_s`` is an estimate
(:mod:`learnerd.sources.cycle_eta`; dlm always sends 0); ``queue_depth`` counts probes not yet written
into the document (accepted ones included). Every probe goes to one document, the daemon's
``[rpc] document`` — a client cannot choose a file to write.

Connections are bounded like every listener's (:class:`learnerd.api.http.ServerLimits`: idle and
header timeout, connection cap); any other failure of a request is answered by
:func:`learnerd.api.http.error_middleware`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import anyio
import structlog
from aiohttp import web

from learnerd.api.blocks import BLOCKS_PATH, BlocksEndpoint
from learnerd.api.errors import (
    BadRequest,
    MethodNotAllowed,
    NotFound,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from learnerd.api.http import (
    ServerLimits,
    bearer_matches,
    error_middleware,
    json_response,
    read_body,
    setup_runner,
    throttle_of,
)
from learnerd.api.json_body import parse_json_body
from learnerd.api.settings import RPC_TOKEN_ENV
from learnerd.privacy.screen import Screen
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
        limits: what a client may hold of the listener (timeouts, connection cap).
        blocks: serves ``POST /v1/blocks`` (:mod:`learnerd.api.blocks`) behind the same token; None: 404.
        screen: redacts a probe's prompt and reference and refuses what the privacy policy refuses, before it is
            journaled (:class:`~learnerd.privacy.screen.Screen`); None: neither.
        on_redacted: told the placeholders put in, by kind (the daemon's count of every intake).
        on_refused: told the reason of each probe the screen refused.

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
        limits: ServerLimits | None = None,
        blocks: BlocksEndpoint | None = None,
        screen: Screen | None = None,
        on_redacted: Callable[[Mapping[str, int]], None] | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        if not token:
            raise ValueError(f"the RPC server needs a bearer token; set {RPC_TOKEN_ENV}")
        self._inbox = inbox
        self._token = token.encode("utf-8")
        self._document = document
        self._eta = eta
        self.host = host
        self.port = port
        self.limits = limits or ServerLimits()
        self._blocks = blocks
        self._screen = screen
        self._on_redacted = on_redacted
        self._on_refused = on_refused
        self.app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[error_middleware])
        self.app.router.add_post(RPC_PATH, self._handle)
        if blocks is not None:
            self.app.router.add_post(BLOCKS_PATH, self._handle_blocks)
        self.app.router.add_route("*", "/{tail:.*}", self._not_found)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; reports started once the socket is bound (then :attr:`port` is real).

        Raises:
            OSError: the address cannot be bound.
        """
        where = f"{self.host}:{self.port}"
        runner = await setup_runner(self.app, self.limits, where=where, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S)
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
        if request.path == RPC_PATH or (request.path == BLOCKS_PATH and self._blocks is not None):
            raise MethodNotAllowed(f"{request.method} not allowed; use POST", headers={"Allow": "POST"})
        raise NotFound(f"unknown path {request.path}")

    def _authorize(self, request: web.Request) -> None:
        """Raise :class:`Unauthorized` (and log it, throttled) unless the request bears the token."""
        if not bearer_matches(request, self._token):
            throttle_of(request).warning(
                "refused", "rpc request refused: missing or wrong bearer token", remote=request.remote
            )
            raise Unauthorized("missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})

    def _screened(self, prompt: str, reference: str) -> tuple[str, str]:
        """``(prompt, reference)`` through the screen; raises :class:`BadRequest` for a refused probe."""
        if self._screen is None:
            return prompt, reference
        screened = self._screen.screen(prompt, reference)
        if screened.refusal is not None:
            log.warning("rpc probe refused by the privacy policy", reason=screened.refusal)
            if self._on_refused is not None:
                self._on_refused(f"refused by policy: {screened.refusal}")
            raise BadRequest(f"refused by the privacy policy: {screened.refusal}")
        if screened.kinds and self._on_redacted is not None:
            self._on_redacted(screened.kinds)
        return screened.intent, screened.command

    async def _handle_blocks(self, request: web.Request) -> web.Response:
        assert self._blocks is not None
        return await self._blocks.handle(request, self._authorize)

    async def _handle(self, request: web.Request) -> web.Response:
        self._authorize(request)
        prompt, reference, tags = _parse(await read_body(request))
        prompt, reference = self._screened(prompt, reference)  # before the journal, the first write
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
            raise BadRequest(f"the probe cannot be written as a ### Q / ### A section: {exc}") from None
        try:
            depth = await self._inbox.submit(probe)
        except InboxFull as exc:
            raise TooManyRequests(str(exc), queue_depth=self._inbox.depth) from None
        except ValueError as exc:  # the probe cannot be journaled (checked alone, before its group commit)
            raise BadRequest(f"probe not accepted: {exc}") from None
        except (InboxClosed, OSError) as exc:
            raise Unavailable(f"probe not accepted: {exc}") from None
        eta = self._eta(self._document)
        log.debug("rpc.probe_accepted", probe_id=probe.id, tags=list(tags), queue_depth=depth)
        return json_response({"accepted": True, "next_cycle_eta_s": math.ceil(eta), "queue_depth": depth})


def _parse(body: bytes) -> tuple[str, str, tuple[str, ...]]:
    """``(prompt, reference, tags)`` of an ``inject_probe`` request body: the RPC body parser.

    Raises:
        BadRequest: empty, not a JSON object (:func:`~learnerd.api.json_body.parse_json_body`'s limits),
            or the params are not what ``inject_probe`` takes. NotFound: another ``method``.
    """
    if not body:
        raise BadRequest("empty body")
    try:
        payload = parse_json_body(body)
    except BadRequest as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadRequest("payload must be a JSON object")
    method = payload.get("method")
    if method != METHOD_INJECT_PROBE:
        raise NotFound(f"unknown method {method!r}")
    params = payload.get("params", {})
    if not isinstance(params, dict):
        raise BadRequest("`params` must be an object")
    prompt, reference, tags = params.get("prompt"), params.get("reference"), params.get("tags", [])
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest("`params.prompt` must be a non-empty string")
    if not isinstance(reference, str) or not reference.strip():
        raise BadRequest("`params.reference` must be a non-empty string")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise BadRequest("`params.tags` must be a list of strings")
    return prompt.strip(), reference.strip(), tuple(tags)
