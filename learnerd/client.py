"""A small client for assistants: retrieval, chat, probe injection and block logging against a running
``learnerd run``.

* :meth:`LearnerdClient.search` — ``POST /search`` (``--listen-search``);
* :meth:`LearnerdClient.chat` — the official ``openai`` client on the OpenAI-compatible endpoint
  (``--listen-openai``); :attr:`LearnerdClient.openai` is that client;
* :meth:`LearnerdClient.inject_probe` — dlm's ``inject_probe`` on ``POST /rpc`` (``--listen-rpc``);
* :meth:`LearnerdClient.log_block` / :meth:`LearnerdClient.log_events` — block-log events (the format of
  ``docs/block-log-format.md``) on ``POST /v1/blocks``, the same listener; what the daemon learns from
  (``docs/integrations.md``).

:class:`AsyncLearnerdClient` has the same methods as coroutines. A token left out is the surface's environment
variable (``$LEARNERD_SEARCH_TOKEN``, ``$LEARNERD_OPENAI_TOKEN``, ``$LEARNERD_PROBE_TOKEN``), else the token file
``learnerd init`` wrote (:func:`learnerd.api.tokens.client_token`: beside ``$LEARNERD_CONFIG``, else in
``$XDG_CONFIG_HOME/learnerd``), the one the daemon serves behind. Every HTTP error raises :class:`LearnerdError`
(``openai``'s own errors for chat: a document's model without the token is ``openai.AuthenticationError``).
"""

from __future__ import annotations

import json
import time as _time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Required, TypedDict, Unpack

import aiohttp
import openai
from openai.types.chat import ChatCompletionMessageParam

from learnerd.analyzer.blocklog import event_line
from learnerd.api.tokens import client_token
from learnerd.store.blocks import Cell
from learnerd.store.retrieval import SearchHit

SEARCH_TOKEN_ENV = "LEARNERD_SEARCH_TOKEN"
OPENAI_TOKEN_ENV = "LEARNERD_OPENAI_TOKEN"
PROBE_TOKEN_ENV = "LEARNERD_PROBE_TOKEN"


class ProbeAccepted(TypedDict):
    """``next_cycle_eta_s``: estimated seconds until the training cycle that learns it; ``queue_depth``: probes
    accepted and not yet written into the document."""

    accepted: bool
    next_cycle_eta_s: int
    queue_depth: int


class BlocksAccepted(TypedDict):
    """``accepted``: events the daemon made durable (fsynced) for its analyzer; ``block_ids``: the blocks they are
    about, in order of first mention."""

    accepted: int
    block_ids: list[str]


class LearnerdError(RuntimeError):
    """learnerd answered an HTTP error (``status``) with ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _headers(token: str | None, env: str) -> dict[str, str]:
    token = token or client_token(env)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _checked(status: int, body: bytes) -> Any:
    """The JSON answer; :class:`LearnerdError` with the answer's ``error`` for a status >= 400."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = body.decode(errors="replace")
    if status >= 400:
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        raise LearnerdError(status, error if isinstance(error, str) else json.dumps(error))
    return payload


def _probe_body(prompt: str, reference: str, tags: Iterable[str]) -> dict[str, Any]:
    return {"method": "inject_probe", "params": {"prompt": prompt, "reference": reference, "tags": list(tags)}}


class BlockFields(TypedDict, total=False):
    """What :meth:`LearnerdClient.log_block` says about a block besides its executed code."""

    exit_code: Required[int | None]
    """the executed code's exit status: 0 or None (unknown) — the block may be learned; anything else — it is
    kept, never learned"""
    context: Sequence[str | Cell]
    """the cells before it, in order (a string is a markdown cell); the markdown right before the block is the
    example's query, headings included (default: none — then nothing is learned from it)"""
    language: str
    """the code's language, e.g. ``"bash"``, ``"python"`` (default ``""``)"""
    generated: str | None
    """what the assistant suggested for the block, if anything"""
    block_id: str | None
    """default: a new random id (returned in ``block_ids``); log again with the same id and a later ``time``
    for a re-execution"""
    time: float | None
    """when it ran, epoch seconds (default: now)"""
    eval_mode: bool
    """produced while evaluating the assistant: never learned from"""
    session: str | None
    """the session it ran in (a terminal, a conversation): the one passed as ``metadata={"session": …}`` to
    :meth:`LearnerdClient.chat` makes this run count for the answer served there (docs/operations.md, "Suggestions")"""


def _block_events(
    executed: str,
    *,
    exit_code: int | None,
    context: Sequence[str | Cell] = (),
    language: str = "",
    generated: str | None = None,
    block_id: str | None = None,
    time: float | None = None,
    eval_mode: bool = False,
    session: str | None = None,
) -> list[dict[str, Any]]:
    """The block-log events of one block (:class:`BlockFields`), written by
    :func:`learnerd.analyzer.blocklog.event_line`: a context event, a generated one when given, an executed one."""
    block_id = block_id or f"block-{uuid.uuid4().hex}"
    when = _time.time() if time is None else time
    cells = [Cell("markup", c) if isinstance(c, str) else c for c in context]
    common: dict[str, Any] = {"eval_mode": eval_mode, "session": session}
    lines = [event_line("context", block_id, when, cells=cells, **common)]
    if generated is not None:
        suggested = Cell("code", generated, language)
        lines.append(event_line("generated", block_id, when, cell=suggested, **common))
    ran = Cell("code", executed, language)
    lines.append(event_line("executed", block_id, when, cell=ran, exit_code=exit_code, **common))
    return [json.loads(line) for line in lines]


class _Endpoints:
    def __init__(
        self,
        search_url: str | None,
        openai_url: str | None,
        rpc_url: str | None,
        search_token: str | None,
        openai_token: str | None,
        probe_token: str | None,
    ) -> None:
        self.search_url, self.rpc_url = search_url, rpc_url
        self.openai_url = openai_url
        self.search_headers = _headers(search_token, SEARCH_TOKEN_ENV)
        self.rpc_headers = _headers(probe_token, PROBE_TOKEN_ENV)
        self.openai_key = openai_token or client_token(OPENAI_TOKEN_ENV) or "none"

    def url(self, base: str | None, path: str, what: str) -> str:
        if base is None:
            raise ValueError(f"no {what} URL given")
        return base.rstrip("/") + path


class LearnerdClient(_Endpoints):
    """Synchronous client. URLs: ``search_url`` ``http://HOST:PORT`` of ``--listen-search``, ``openai_url``
    ``http://HOST:PORT/v1`` of ``--listen-openai``, ``rpc_url`` ``http://HOST:PORT`` of ``--listen-rpc``;
    ``timeout_s`` bounds each request (seconds)."""

    def __init__(
        self,
        *,
        search_url: str | None = None,
        openai_url: str | None = None,
        rpc_url: str | None = None,
        search_token: str | None = None,
        openai_token: str | None = None,
        probe_token: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__(search_url, openai_url, rpc_url, search_token, openai_token, probe_token)
        self.timeout_s = timeout_s
        self.openai = openai.OpenAI(base_url=openai_url, api_key=self.openai_key, timeout=timeout_s)

    def search(self, text: str, k: int = 3) -> list[SearchHit]:
        """The ``k`` learned examples nearest to ``text``, best first. Raises :class:`LearnerdError`."""
        url = self.url(self.search_url, "/search", "search")
        return self._post(url, {"text": text, "k": k}, self.search_headers)

    def _post(self, url: str, body: Any, headers: dict[str, str]) -> Any:
        request = urllib.request.Request(
            url, json.dumps(body).encode(), {**headers, "Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _checked(response.status, response.read())
        except urllib.error.HTTPError as exc:
            return _checked(exc.code, exc.read())

    def chat(self, model: str, messages: Sequence[ChatCompletionMessageParam], **kwargs: Any) -> Any:
        """``chat.completions.create`` of the ``openai`` package on learnerd (``stream=True`` gives the
        chunk iterator; ``extra_body={"learnerd": {"rag_k": 3}}`` adds retrieved examples)."""
        self.url(self.openai_url, "", "OpenAI endpoint")
        return self.openai.chat.completions.create(model=model, messages=list(messages), **kwargs)

    def inject_probe(self, prompt: str, reference: str, tags: Iterable[str] = ()) -> ProbeAccepted:
        """Push a probe into the next training cycle (dlm's contract). Raises :class:`LearnerdError`."""
        url = self.url(self.rpc_url, "/rpc", "RPC")
        return self._post(url, _probe_body(prompt, reference, tags), self.rpc_headers)

    def log_events(self, events: Iterable[Mapping[str, Any]]) -> BlocksAccepted:
        """Log block-log events (``docs/block-log-format.md``) with ``POST /v1/blocks``; all or none are accepted,
        and they are durable when this returns.

        Raises:
            LearnerdError: refused (400 names the bad event's ``index``; 401 a wrong token; 503 not written).
        """
        url = self.url(self.rpc_url, "/v1/blocks", "RPC")
        return self._post(url, [dict(e) for e in events], self.rpc_headers)

    def log_block(self, executed: str, **block: Unpack[BlockFields]) -> BlocksAccepted:
        """Log one block: the ``executed`` code and what :class:`BlockFields` says about it (``exit_code`` is
        required: it decides whether the block may be learned).

        Raises:
            ValueError: the arguments make no valid event (:func:`~learnerd.analyzer.blocklog.event_line`).
            LearnerdError: refused, as :meth:`log_events`.
        """
        return self.log_events(_block_events(executed, **block))

    def close(self) -> None:
        self.openai.close()

    def __enter__(self) -> LearnerdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLearnerdClient(_Endpoints):
    """:class:`LearnerdClient` as coroutines (``aiohttp``, ``openai.AsyncOpenAI``); use it inside a running loop."""

    def __init__(
        self,
        *,
        search_url: str | None = None,
        openai_url: str | None = None,
        rpc_url: str | None = None,
        search_token: str | None = None,
        openai_token: str | None = None,
        probe_token: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__(search_url, openai_url, rpc_url, search_token, openai_token, probe_token)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self.openai = openai.AsyncOpenAI(base_url=openai_url, api_key=self.openai_key, timeout=timeout_s)

    async def search(self, text: str, k: int = 3) -> list[SearchHit]:
        url = self.url(self.search_url, "/search", "search")
        return await self._post(url, {"text": text, "k": k}, self.search_headers)

    async def _post(self, url: str, body: Any, headers: dict[str, str]) -> Any:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        async with self._http.post(url, json=body, headers=headers) as response:
            return _checked(response.status, await response.read())

    async def chat(self, model: str, messages: Sequence[ChatCompletionMessageParam], **kwargs: Any) -> Any:
        self.url(self.openai_url, "", "OpenAI endpoint")
        return await self.openai.chat.completions.create(model=model, messages=list(messages), **kwargs)

    async def inject_probe(self, prompt: str, reference: str, tags: Iterable[str] = ()) -> ProbeAccepted:
        url = self.url(self.rpc_url, "/rpc", "RPC")
        return await self._post(url, _probe_body(prompt, reference, tags), self.rpc_headers)

    async def log_events(self, events: Iterable[Mapping[str, Any]]) -> BlocksAccepted:
        url = self.url(self.rpc_url, "/v1/blocks", "RPC")
        return await self._post(url, [dict(e) for e in events], self.rpc_headers)

    async def log_block(self, executed: str, **block: Unpack[BlockFields]) -> BlocksAccepted:
        return await self.log_events(_block_events(executed, **block))

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
        await self.openai.close()

    async def __aenter__(self) -> AsyncLearnerdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
