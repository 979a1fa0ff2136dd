"""The OpenAI-compatible endpoint (``learnerd run --listen-openai HOST:PORT``): ``GET /v1/models`` and
``POST /v1/chat/completions`` (with server-sent events when ``stream``), after OpenAI's API reference.

Models: the base models, and one per ``.dlm`` document (id = the file's stem, its ``dlm_id`` accepted
too), answering with the document's current adapter (:mod:`learnerd.ml.serving` swaps it in on promotion)
and its ``system_prompt`` first when the request has no system message.

learnerd's extension, ``"learnerd": {"rag_k": K}`` in the body (default ``[serve] rag_k`` for a document's model,
0 for a base's): the K learned examples nearest to the last user message go into the system message as one block
of quoted data (:func:`learnerd.ml.retrieved_examples.with_examples`), as foyle's agent puts its few-shot
examples in the prompt; an adapter trained with retrieval-augmented rows has learned to answer under that
block. A document version trained without it is quoted only the examples it has not learned (its manifest says
which it did): the others, among the K nearest, are held back (``withheld``), as it answers them better without
the block.
Every response carries ``"learnerd": {"adapter", "doc_key", "max_tokens", "retrieved", "withheld", "routed",
"similarity", "context_alpha"}`` (the first chunk of a stream), so a client sees what answered it, and ``"chosen"``
(a stream's last chunk): the id of the retrieved example whose command the answer carries, or None.

A greedy answer under retrieved examples (``[serve] choose_quoted``, the transformers backend, no ``stop`` strings)
carries the quoted command the model itself finds about as likely as its own in its command's place
(:func:`learnerd.ml.choice.choose_command`, within ``[serve] choice_margin`` nats per token): a near copy of a logged
command becomes the command; a stream then sends the answer as one delta once it is decided.

A request the base answers under retrieved examples is decoded with context-aware decoding at ``[serve]
context_alpha`` (:func:`learnerd.ml.generate.context_guidance`: the answer leans on the quoted examples over what the
model recalls without them); ``context_alpha`` says the α applied (0: nothing quoted, the adapter answers — it
trained under such blocks, and the decoding cost its dialogue answers —, the option off, or the llama.cpp backend,
which cannot). Such an answer ends with the closing fence of its first fenced code block (``finish_reason``
``stop``; :func:`learnerd.store.suggestions.first_block_end`), on either backend: the quoted examples are commands
in such blocks, the command is what the client takes from it (:func:`~learnerd.store.suggestions.command_of`), and
what a small base writes after it is seconds of text that does not change it.

Routing (``[serve] routing = "similarity"``, the default; :mod:`learnerd.ml.router`). A document's request is
compared with the questions its served version learned. Its ``similarity`` is the nearest one's cosine similarity;
at or above the version's threshold (recorded in its manifest), and no retrieved example logged since the version's
cycle nearer, the adapter answers (``routed: "adapter"``), otherwise the base (``"base"``, inside
``disable_adapter()``); before a first version the base answers everything
(``similarity``: the nearest retrieved example's). An adapter that trained under retrieved examples is quoted the
``rag_k`` nearest however far, as its retrieval-augmented training rows quoted them, one that trained without them
those at or above the threshold; the base only the nearest, and only at or above the threshold
(:data:`~learnerd.ml.router.DEFAULT_THRESHOLD` before a first version; :func:`~learnerd.ml.router.served_examples`; a
request that sets its own ``learnerd.rag_k`` is quoted its K nearest, whoever answers): a request about nothing the
document holds ("What is 17 times 3?") reaches the base as the client sent it, and a task logged seconds ago, which no
version learned, is answered by the base from its quoted example. The message is embedded once, for routing and
retrieval both; a version's questions are embedded at its first request. ``"always-adapter"`` sends every request of
a document with a version to its adapter and quotes the ``rag_k`` nearest examples, however far; a base model's
request is compared with nothing and gets retrieved examples only when it asks (``learnerd.rag_k``).

Access: a document's model answers with its learned adapter, which holds what people ran, so it is served only
to a bearer of learnerd's token (``Authorization: Bearer <token>``: the token file ``learnerd init`` writes, or
``$LEARNERD_OPENAI_TOKEN``; :mod:`learnerd.api.tokens`). A request without the token (or with a wrong one) gets,
by ``without_token``: ``"none"`` (off loopback) 401 on every path but the health probes; ``"bases"`` (loopback)
the base models only — a document's model is 401 (``invalid_api_key``, saying why; never the base instead, which
would pass a base's answer off as the document's) and ``/v1/models`` lists the bases alone; ``"all"``
(``--insecure-no-token``) every model. Retrieval answers with what every user ran, so it needs the token in any
case: without it, the default ``[serve] rag_k`` is 0 and a request's own ``rag_k`` is refused (401).

Readiness, one for the whole endpoint: ``/v1/models`` and ``/v1/chat/completions`` both answer 503 with
``Retry-After`` until the daemon runs (start-up: the embedder loads) and while it drains; from then on a
completion waits in the queue for a model still loading. ``/readyz`` says which part is not ready: the
daemon (``starting``, ``draining``), a model loading, or a model that failed its known-answer check.

A request passes, in order: the body's deadline and size (408, 413) and the hardened parser
(:func:`learnerd.api.json_body.parse_json_body`, 400 for deep nesting, huge integers, lone surrogates), the
fields (400: ranges, function calling), the token for a document's model and for retrieval (401), admission to
the queue (429) and a context-length bound from the text's length (400), and only then retrieval (which embeds
the text) and generation.

Every finished answer to a bearer of the token is remembered
(:meth:`~learnerd.api.surface.ControlSurface.record_served`, :mod:`learnerd.store.suggestions`), with the
client's session id from ``metadata`` ``{"session": S}`` or ``user``, so that the person running it later counts
for the adapter version that answered (and its prompt may become an example); an answer to a request without the
token is never remembered.

Errors have OpenAI's body, ``{"error": {"message", "type", "param", "code"}}``: 400 bad JSON or fields,
a prompt longer than the context; 401 no or wrong bearer token; 404 unknown model or path; 408 a body that
did not arrive in time; 413 a body over ``[serve] max_body_bytes``; 429 with ``Retry-After`` when
``[serve] queue_size`` completions are queued or generating; 503 (``Retry-After``) while the daemon starts
or drains, and when the model failed its known-answer check after a reload
(:class:`~learnerd.ml.serving.ModelUnavailable`: a broken model is never served); 503 when the model
cannot be loaded. ``max_tokens`` is clamped to ``[serve] max_tokens``.

Logs: one ``chat completion`` event per request at info, with ids and counts, never the prompt's text (it
may hold what people typed); the whole prompt is logged at debug.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import ValidationError

from learnerd.api.errors import ControlError, Unavailable
from learnerd.api.health import health_routes
from learnerd.api.http import Handler, access_log_middleware, bearer_matches, parse_json, read_body
from learnerd.api.openai_models import ChatCompletionRequest, ModelCard, Usage, error_body
from learnerd.api.settings import ServeConfig
from learnerd.api.surface import ControlSurface
from learnerd.api.tcp_endpoints import bearer_middleware
from learnerd.ml.base_model import BaseModelError
from learnerd.ml.loader import ModelCheckError
from learnerd.ml.retrieved_examples import NOTHING_TRAINED, trained_on, with_examples
from learnerd.ml.router import (
    ADAPTER,
    DEFAULT_THRESHOLD,
    Route,
    Router,
    close_hits,
    recorded_threshold,
    served_examples,
    similarity_route,
    version_routing,
)
from learnerd.ml.rows import ChatMessage
from learnerd.ml.serving import (
    Admission,
    Delta,
    Finished,
    ModelCatalog,
    ModelUnavailable,
    PromptTooLong,
    QueueFull,
    SamplingParams,
    ServedModel,
    ServedModels,
)
from learnerd.store.adapters import AdapterStoreError, AdapterVersion
from learnerd.store.retrieval import SearchHit
from learnerd.store.suggestions import ServedAnswer

log = structlog.get_logger(__name__)


class ServeMetrics:
    """Prometheus metrics of the endpoint, labelled by model id."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "learnerd_serve_requests_total",
            "Chat completion requests, by model and HTTP status",
            ["model", "status"],
            registry=registry,
        )
        self.tokens = Counter(
            "learnerd_serve_generated_tokens_total",
            "Tokens generated (completion tokens)",
            ["model"],
            registry=registry,
        )
        self.ttft = Histogram(
            "learnerd_serve_time_to_first_token_seconds",
            "Seconds from the request to its first generated text",
            ["model"],
            registry=registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.tokens_per_second = Histogram(
            "learnerd_serve_tokens_per_second",
            "Completion tokens per second of generation, per request",
            ["model"],
            registry=registry,
            buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500),
        )
        self.pending = Gauge(
            "learnerd_serve_pending_requests", "Chat completions queued or generating", registry=registry
        )


class OpenAIError(Exception):
    """An error answered with OpenAI's body and ``status`` (``headers`` added)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.type, self.code, self.headers = status, type_, code, headers or {}


def _error(status: int, message: str, type_: str, code: str | None = None, headers: dict[str, str] | None = None):
    response = web.json_response(error_body(message, type_, code), status=status)
    response.headers.update(headers or {})
    return response


_UNAUTHORIZED = ("missing or wrong bearer token", "invalid_request_error", "invalid_api_key")
_ADAPTER_NEEDS_TOKEN = (
    "the model {model!r} answers with a document's learned adapter, which is served only to a bearer of learnerd's "
    "token (missing or wrong: send `Authorization: Bearer <token>`, the token file `learnerd init` writes or "
    "$LEARNERD_OPENAI_TOKEN); without it, ask a base model (GET /v1/models lists them)"
)


@web.middleware
async def openai_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as OpenAI's error body; anything unexpected is a logged 500."""
    try:
        return await handler(request)
    except OpenAIError as exc:
        return _error(exc.status, str(exc), exc.type, exc.code, exc.headers)
    except Unavailable as exc:
        return _error(503, str(exc), "server_error", "unavailable", {"Retry-After": "5", **exc.headers})
    except ControlError as exc:  # 400, 408, 413 …: the body (read_body, parse_json_body)
        return _error(exc.status, str(exc), "invalid_request_error", headers=exc.headers)
    except RequestPayloadError as exc:
        return _error(400, f"the body could not be read: {exc}", "invalid_request_error")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason, "invalid_request_error")
    except Exception:
        log.exception("chat request failed", path=request.path)
        return _error(500, "internal error; see the daemon's log", "server_error")


@dataclass
class _Prepared:
    request: ChatCompletionRequest
    model: ServedModel
    model_id: str
    messages: list[ChatMessage]
    info: dict[str, Any]
    admission: Admission
    version: AdapterVersion | None
    authenticated: bool
    unquoted: list[ChatMessage] | None = None


WithoutToken = Literal["none", "bases", "all"]
"""What a request without the token is served (see the module docstring)."""


class OpenAIEndpoint:
    """The handlers (see the module docstring); ``control`` answers retrieval (``search``)."""

    def __init__(
        self,
        catalog: ModelCatalog,
        served: ServedModels,
        control: ControlSurface,
        settings: ServeConfig,
        metrics: ServeMetrics,
        *,
        token: str | None,
        without_token: WithoutToken,
    ) -> None:
        self.catalog, self.served, self.control, self.settings, self.metrics = (
            catalog,
            served,
            control,
            settings,
            metrics,
        )
        self.token, self.without_token = (token.encode() if token else None), without_token
        self.started = int(time.time())
        self._routers: dict[
            Path, tuple[Path, Router | None, float]
        ] = {}  # document → (version's path, router, threshold)

    def check_ready(self) -> None:
        """Raise the endpoint's 503 while the daemon is not running (see the module docstring)."""
        state = self.control.state
        if state != "running":  # models load and retrieval answers only once start-up is over (see /readyz)
            why = ": the embedder is loading; retry shortly" if state == "starting" else ""
            raise OpenAIError(503, f"learnerd is {state}{why}", "server_error", "unavailable", {"Retry-After": "5"})

    def unready_reason(self) -> str | None:
        """Why the running endpoint is not ready (for ``/readyz``): a model failed its check, or is loading."""
        reason = self.control.unready_reason()
        if reason is not None:
            return reason
        loading = self.served.loading()
        return None if loading is None else f"loading the base model {loading!r} (requests wait for it)"

    def _rejected(self, doc_keys: list[str]) -> dict[str, dict[str, Any] | None]:
        """Per document key: its newest candidate when the promotion gate rejected it (``{"version", "reasons"}``;
        never served), else None (also when its verdict cannot be read: logged)."""
        out: dict[str, dict[str, Any] | None] = {}
        for key in doc_keys:
            try:
                rejected = self.served.adapters.rejected(key)
            except AdapterStoreError as exc:
                log.warning("unreadable gate verdict", doc_key=key, error=str(exc))
                rejected = None
            out[key] = (
                {"version": rejected[0].name, "reasons": list(rejected[1].reasons)} if rejected is not None else None
            )
        return out

    def _authenticated(self, request: web.Request) -> bool:
        """Whether ``request`` bears the token (in constant time: :func:`~learnerd.api.http.bearer_matches`)."""
        return self.token is not None and bearer_matches(request, self.token)

    def _serves_documents(self, request: web.Request) -> bool:
        """Whether ``request`` may be answered by a document's learned adapter (see the module docstring)."""
        return self.without_token == "all" or self._authenticated(request)

    async def list_models(self, request: web.Request) -> web.Response:
        self.check_ready()
        models = await anyio.to_thread.run_sync(self.catalog.models)
        if not self._serves_documents(request):
            models = [m for m in models if not m.doc_key]
        rejected = await anyio.to_thread.run_sync(self._rejected, [m.doc_key for m in models if m.doc_key])
        cards = []
        for m in models:
            version = self.served.current_version(m)
            extra: dict[str, Any] = {"kind": "document" if m.doc_key else "base", "base_model": m.base_model}
            if m.doc_key:
                extra.update(
                    dlm_id=m.doc_key,
                    adapter=version.name if version is not None else None,
                    rejected=rejected[m.doc_key],
                )
            cards.append(ModelCard(id=m.id, created=self.started, learnerd=extra).model_dump())
        return web.json_response({"object": "list", "data": cards})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        received = time.perf_counter()
        status = 500
        model_label = "unknown"
        try:
            self.check_ready()
            prepared = await self._prepare(request)
            model_label = prepared.model_id
            response = await self._answer(request, prepared, received)
            status = response.status
            return response
        except (OpenAIError, ControlError, web.HTTPException) as exc:  # ControlError: the body (408, 413, 400)
            status = exc.status
            raise
        finally:
            self.metrics.requests.labels(model_label, str(status)).inc()
            self.metrics.pending.set(self.served.pending)

    async def _prepare(self, request: web.Request) -> _Prepared:
        body = await parse_json(await read_body(request))  # 408, 413, 400 (ControlError: the middleware)
        if not isinstance(body, dict):
            raise OpenAIError(400, "the body must be a JSON object")
        try:
            req = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise OpenAIError(400, f"{where}: {first['msg']}" if where else first["msg"]) from None
        model = await anyio.to_thread.run_sync(self.catalog.find, req.model)
        if model is None:
            raise OpenAIError(404, f"the model {req.model!r} does not exist", code="model_not_found")
        authenticated = self._authenticated(request)
        if model.doc_key and not self._serves_documents(request):
            raise OpenAIError(401, _ADAPTER_NEEDS_TOKEN.format(model=req.model), code="invalid_api_key")
        messages = [ChatMessage("system" if m.role == "developer" else m.role, m.text()) for m in req.messages]
        if model.system_prompt and not any(m.role == "system" for m in messages):
            messages.insert(0, ChatMessage("system", model.system_prompt))
        asked = req.learnerd.rag_k if req.learnerd is not None else None
        k = asked if asked is not None else self.settings.rag_k if authenticated and model.doc_key else 0
        if k > 0 and not authenticated:
            raise OpenAIError(
                401,
                "learnerd.rag_k: retrieval answers with what every user ran, so it needs learnerd's bearer token "
                "(the token file `learnerd init` writes, or $LEARNERD_OPENAI_TOKEN)",
                code="invalid_api_key",
            )
        try:
            admission = self.served.admit()
        except QueueFull as exc:
            raise _too_many(exc) from None
        try:
            try:
                self.served.check_prompt(model, messages)
            except PromptTooLong as exc:
                raise OpenAIError(400, str(exc), code="context_length_exceeded") from None
            current = self.served.current_version(model)
            plan = await self._route_and_retrieve(model, current, messages, k, every_hit=asked is not None)
            route, version, retrieved, withheld = plan
        except BaseException:
            admission.release()
            raise
        wanted = req.max_completion_tokens or req.max_tokens or self.settings.max_tokens
        guided = bool(retrieved) and version is None  # the base answers under retrieved examples
        info = {
            "doc_key": model.doc_key,
            "max_tokens": min(wanted, self.settings.max_tokens),
            "retrieved": retrieved,
            "withheld": withheld,
            "routed": route.routed,
            "similarity": None if route.similarity is None else round(route.similarity, 4),
            "context_alpha": self.settings.served_context_alpha if guided else 0.0,
        }
        unquoted = messages if guided else None
        messages = with_examples(messages, retrieved)
        return _Prepared(req, model, model.id, messages, info, admission, version, authenticated, unquoted)

    async def _route_and_retrieve(
        self, model: ServedModel, current: AdapterVersion | None, messages: list[ChatMessage], k: int, every_hit: bool
    ) -> tuple[Route, AdapterVersion | None, list[dict[str, Any]], list[str]]:
        """Who answers the request, the version that does (None: the base) and the retrieved examples to quote and
        those held back (module docstring, "Routing"); ``every_hit``: the request asked for its ``k`` (its own
        ``learnerd.rag_k``), quoted however far. The last user message is embedded once, for both."""
        last_user = _last_user(messages)
        if last_user is None:
            return (ADAPTER if current else Route("base")), current, [], []
        similarity = self.settings.routing == "similarity" and model.doc_key is not None and model.path is not None
        router, threshold = await self._router(model, current) if similarity else (None, None)
        vector, learned = None, None  # the message's embedding; its nearest learned question's similarity
        if router is not None or (k > 0 and threshold is not None):
            vector = (await self.control.embed([last_user.content]))[0]
            learned = router.route(vector).similarity if router is not None else None
        found = await self._search(last_user.content, k, vector) if k > 0 else []
        hits = close_hits(found, threshold)
        trained = await anyio.to_thread.run_sync(trained_on, current) if current else NOTHING_TRAINED
        if similarity:
            route = similarity_route(current is not None, router, learned, hits, learned_examples=trained.example_ids)
        else:
            route = ADAPTER if current else Route("base")
        version = current if route.routed == "adapter" else None
        by_adapter = version is not None
        retrieved, withheld = served_examples(found, by_adapter, threshold, trained, every_hit=every_hit)
        return route, version, retrieved, withheld

    async def _search(self, text: str, k: int, vector: Any) -> list[SearchHit]:
        """The ``k`` examples nearest to ``text`` (``vector``: its embedding, None: not made yet)."""
        try:
            return await self.control.search(text, k, vector)
        except Unavailable as exc:
            raise OpenAIError(503, str(exc), "server_error", "unavailable", {"Retry-After": "5"}) from None
        except ControlError as exc:
            raise OpenAIError(400, f"learnerd.rag_k: {exc}") from None

    async def _router(self, model: ServedModel, version: AdapterVersion | None) -> tuple[Router | None, float]:
        """``model``'s router for ``version`` (None: before a first version, or a version that learned no question)
        and the threshold of its similarities: the version's recorded one, :data:`DEFAULT_THRESHOLD` before one."""
        if version is None or model.path is None:
            return None, DEFAULT_THRESHOLD
        cached = self._routers.get(model.path)
        if cached is None or cached[0] != version.path:
            questions, routing = await anyio.to_thread.run_sync(version_routing, model.path, version)
            threshold = recorded_threshold(routing, self.control.embedder_name)
            router = Router(await self.control.embed(questions), threshold) if questions else None
            cached = (version.path, router, threshold)
            self._routers[model.path] = cached
        return cached[1], cached[2]

    async def _answer(self, request: web.Request, p: _Prepared, received: float) -> web.StreamResponse:
        req = p.request
        try:
            temperature = self.settings.temperature if req.temperature is None else req.temperature
            guided = p.unquoted is not None  # the base answers under retrieved examples: it ends with their form
            params = SamplingParams(
                p.info["max_tokens"],
                temperature,
                req.top_p,
                req.stop_strings(),
                req.seed,
                p.info["context_alpha"],
                end_at_block=guided,
                choice_margin=self.settings.served_choice_margin,
            )
            quoted = [str(h["answer"]) for h in p.info["retrieved"]]
            job = self.served.submit(p.model, p.messages, params, p.admission, p.version, p.unquoted, quoted)
        finally:
            p.admission.release()  # a no-op once the job holds the place
        self.metrics.pending.set(self.served.pending)
        p.info["adapter"] = job.version.name if job.version is not None else None
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        events = job.events()
        first_at: float | None = None
        try:
            try:
                first = await events.__anext__()
            except PromptTooLong as exc:
                raise OpenAIError(400, str(exc), code="context_length_exceeded") from None
            except ModelUnavailable as exc:
                raise OpenAIError(
                    503,
                    f"the model is not served: {exc}",
                    "server_error",
                    "unavailable",
                    {"Retry-After": str(exc.retry_after_s)},
                ) from None
            except (BaseModelError, AdapterStoreError, ModelCheckError) as exc:
                raise OpenAIError(503, f"the model cannot be served: {exc}", "server_error", "unavailable") from None
            if isinstance(first, Delta):
                first_at = time.perf_counter()
            if req.stream:
                return await self._stream(request, p, job, completion_id, first, events, received)
            text: list[str] = []
            item = first
            while isinstance(item, Delta):
                text.append(item.text)
                item = await events.__anext__()
            if first_at is None and item.completion_tokens:
                first_at = time.perf_counter()
            self._observe(p, item, received, first_at)
            p.info["chosen"] = _chosen(p, item)
            body = {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": p.model_id,
                "system_fingerprint": _fingerprint(p.info),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(text)},
                        "finish_reason": item.finish_reason,
                        "logprobs": None,
                    }
                ],
                "usage": _usage(item).model_dump(),
                "learnerd": p.info,
            }
            return web.json_response(body, dumps=lambda d: json.dumps(d, ensure_ascii=False))
        finally:
            job.cancel()  # a no-op once finished; stops generation when the handler was cancelled

    async def _stream(
        self,
        request: web.Request,
        p: _Prepared,
        job: Any,
        completion_id: str,
        first: Delta | Finished,
        events: AsyncIterator[Delta | Finished],
        received: float,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            body = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": p.model_id,
                "system_fingerprint": _fingerprint(p.info),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                **extra,
            }
            return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

        first_at = time.perf_counter() if isinstance(first, Delta) else None
        try:
            await response.write(chunk({"role": "assistant", "content": ""}, learnerd=p.info))
            item = first
            while isinstance(item, Delta):
                await response.write(chunk({"content": item.text}))
                item = await events.__anext__()
            self._observe(p, item, received, first_at)
            await response.write(chunk({}, item.finish_reason, learnerd={"chosen": _chosen(p, item)}))
            if p.request.stream_options is not None and p.request.stream_options.include_usage:
                usage = {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": p.model_id,
                    "choices": [],
                    "usage": _usage(item).model_dump(),
                }
                await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, OSError):
            job.cancel()
            log.info("chat stream closed by the client", model=p.model_id)
            await self._observe_cancelled(p, events, received, first_at)
        return response

    async def _observe_cancelled(
        self, p: _Prepared, events: AsyncIterator[Delta | Finished], received: float, first_at: float | None
    ) -> None:
        """Count what a cancelled job generated (it stops at its next token): its :class:`Finished`."""
        try:
            async for item in events:
                if isinstance(item, Finished):
                    self._observe(p, item, received, first_at)
        except Exception as exc:  # the job failed while stopping: nothing was generated to count
            log.info("cancelled chat stream ended with an error", model=p.model_id, error=type(exc).__name__)

    def _observe(self, p: _Prepared, done: Finished, received: float, first_at: float | None) -> None:
        labels = (p.model_id,)
        self.metrics.tokens.labels(*labels).inc(done.completion_tokens)
        if first_at is not None:
            self.metrics.ttft.labels(*labels).observe(first_at - received)
        if done.generate_s > 0 and done.completion_tokens:
            self.metrics.tokens_per_second.labels(*labels).observe(done.completion_tokens / done.generate_s)
        log.debug("chat prompt", model=p.model_id, prompt=[m._asdict() for m in p.messages])
        log.info(
            "chat completion",
            model=p.model_id,
            adapter=done.adapter,
            routed=p.info["routed"],
            similarity=p.info["similarity"],
            retrieved=[h["id"] for h in p.info["retrieved"]],
            prompt_tokens=done.prompt_tokens,
            completion_tokens=done.completion_tokens,
            finish_reason=done.finish_reason,
            duration_s=round(time.perf_counter() - received, 6),
        )
        if done.finish_reason != "cancelled" and p.authenticated:  # what it served a bearer (store.suggestions)
            self.control.record_served(_served_answer(p, done))


def _chosen(p: _Prepared, done: Finished) -> str | None:
    """The id of the retrieved example whose command the answer carries (:attr:`Finished.chosen`), None: its own."""
    return None if done.chosen is None else str(p.info["retrieved"][done.chosen]["id"])


def _too_many(exc: QueueFull) -> OpenAIError:
    return OpenAIError(
        429, str(exc), "requests", "rate_limit_exceeded", headers={"Retry-After": str(exc.retry_after_s)}
    )


def _usage(done: Finished) -> Usage:
    return Usage(
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        total_tokens=done.prompt_tokens + done.completion_tokens,
    )


def _served_answer(p: _Prepared, done: Finished) -> ServedAnswer:
    """The answer as a suggestion: the two halves of its ``system_fingerprint``, the request's own turns
    (without the retrieved examples and the document's system prompt), the ids retrieved."""
    return ServedAnswer(
        document=p.info["doc_key"] or p.model_id,
        version=done.adapter or "base",
        session=p.request.session(),
        turns=tuple(("system" if m.role == "developer" else m.role, m.text()) for m in p.request.messages),
        answer=done.text,
        retrieved=tuple(str(h["id"]) for h in p.info["retrieved"]),
        served_at=time.time(),
    )


def _last_user(messages: list[ChatMessage]) -> ChatMessage | None:
    return next((m for m in reversed(messages) if m.role == "user"), None)


def _fingerprint(info: dict[str, Any]) -> str:
    """``<dlm_id>@vNNNN`` (the adapter that answers), ``<dlm_id>@base`` before the first, ``base`` for a base."""
    if info["doc_key"] is None:
        return "base"
    return f"{info['doc_key']}@{info.get('adapter') or 'base'}"


async def _not_found(request: web.Request) -> web.Response:
    raise OpenAIError(404, f"no such path: {request.method} {request.path}", code="not_found")


def openai_app(
    catalog: ModelCatalog,
    served: ServedModels,
    control: ControlSurface,
    settings: ServeConfig,
    registry: CollectorRegistry,
    token: str | None,
    *,
    without_token: WithoutToken,
) -> web.Application:
    """The endpoint's aiohttp application, with the health probes (:mod:`learnerd.api.health`, no token);
    ``token`` None authenticates nobody (loopback only: the caller checks); ``without_token`` says what a request
    without the token is served (the module docstring: ``"bases"`` on loopback, ``"all"`` for
    ``--insecure-no-token``).

    Raises:
        ValueError: ``[serve] rag_k`` set above 0, or ``without_token`` ``"none"``, without a token (the default
            ``rag_k`` serves nobody without one: only a bearer of the token is given retrieved examples).
    """
    if token is None and ((settings.rag_k > 0 and "rag_k" in settings.model_fields_set) or without_token == "none"):
        raise ValueError("serving retrieved examples ([serve] rag_k), or off loopback, needs a bearer token")
    middlewares: list[Any] = [access_log_middleware("openai request", lambda r: {"remote": r.remote})]
    if token is not None and without_token == "none":
        middlewares.append(bearer_middleware(token, lambda: _error(401, *_UNAUTHORIZED), what="openai"))
    middlewares.append(openai_error_middleware)
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=middlewares)
    metrics = ServeMetrics(registry)
    endpoint = OpenAIEndpoint(catalog, served, control, settings, metrics, token=token, without_token=without_token)
    app.router.add_get("/v1/models", endpoint.list_models)
    app.router.add_post("/v1/chat/completions", endpoint.chat_completions)
    app.add_routes(health_routes(lambda: control.state, endpoint.unready_reason))
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app
