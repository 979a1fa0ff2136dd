"""A small client for assistants: retrieval, chat and probe injection against a running ``learnerd run``.

* :meth:`LearnerdClient.search` — ``POST /search`` (``--listen-search``, token ``$LEARNERD_SEARCH_TOKEN``);
* :meth:`LearnerdClient.chat` — the official ``openai`` client on the OpenAI-compatible endpoint
  (``--listen-openai``, token ``$LEARNERD_OPENAI_TOKEN``); :attr:`LearnerdClient.openai` is that client;
* :meth:`LearnerdClient.inject_probe` — dlm's ``inject_probe`` on ``POST /rpc`` (``--listen-rpc``, token
  ``$LEARNERD_PROBE_TOKEN``).

:class:`AsyncLearnerdClient` has the same methods as coroutines. Tokens left out are read from those
environment variables. Every HTTP error raises :class:`LearnerdError` (``openai``'s own errors for chat).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import aiohttp
import openai

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


class LearnerdError(RuntimeError):
    """learnerd answered an HTTP error (``status``) with ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def _headers(token: str | None, env: str) -> dict[str, str]:
    token = token or os.environ.get(env)
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
        self.openai_key = openai_token or os.environ.get(OPENAI_TOKEN_ENV) or "none"

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

    def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        request = urllib.request.Request(
            url, json.dumps(body).encode(), {**headers, "Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _checked(response.status, response.read())
        except urllib.error.HTTPError as exc:
            return _checked(exc.code, exc.read())

    def chat(self, model: str, messages: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        """``chat.completions.create`` of the ``openai`` package on learnerd (``stream=True`` gives the
        chunk iterator; ``extra_body={"learnerd": {"rag_k": 3}}`` adds retrieved examples)."""
        self.url(self.openai_url, "", "OpenAI endpoint")
        return self.openai.chat.completions.create(model=model, messages=list(messages), **kwargs)

    def inject_probe(self, prompt: str, reference: str, tags: Iterable[str] = ()) -> ProbeAccepted:
        """Push a probe into the next training cycle (dlm's contract). Raises :class:`LearnerdError`."""
        url = self.url(self.rpc_url, "/rpc", "RPC")
        return self._post(url, _probe_body(prompt, reference, tags), self.rpc_headers)

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

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        async with self._http.post(url, json=body, headers=headers) as response:
            return _checked(response.status, await response.read())

    async def chat(self, model: str, messages: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        self.url(self.openai_url, "", "OpenAI endpoint")
        return await self.openai.chat.completions.create(model=model, messages=list(messages), **kwargs)

    async def inject_probe(self, prompt: str, reference: str, tags: Iterable[str] = ()) -> ProbeAccepted:
        url = self.url(self.rpc_url, "/rpc", "RPC")
        return await self._post(url, _probe_body(prompt, reference, tags), self.rpc_headers)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
        await self.openai.close()

    async def __aenter__(self) -> AsyncLearnerdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
