"""A client of a vLLM server's runtime LoRA API: list, load and unload adapters by name.

Source of the shapes: vLLM's OpenAI-compatible server (``vllm/entrypoints/openai/api_server.py`` and
``serving_models.py``; the routes exist when the server runs with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``):

* ``GET /v1/models`` → ``{"object": "list", "data": [{"id", "root", "parent", ...}]}``: the base models
  (``parent`` null) and the loaded LoRA adapters (``id`` the adapter's name, ``root`` its path, ``parent`` its
  base model);
* ``POST /v1/load_lora_adapter`` ``{"lora_name": str, "lora_path": str}`` → 200 with a plain-text
  ``Success: LoRA adapter '<name>' added successfully.``; 400 ``The lora adapter '<name>' has already been
  loaded.`` for a name already loaded (taken as success: the call is idempotent here);
* ``POST /v1/unload_lora_adapter`` ``{"lora_name": str}`` → 200 plain text; 404 ``The lora adapter '<name>'
  cannot be found.`` (taken as success).

Errors are JSON, ``{"error": {"message", "type", "code"}}`` (vLLM ≥ 0.10) or ``{"object": "error", "message",
"type", "code"}`` (before). With ``--api-key`` every route wants ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class VllmCallFailed(Exception):
    """A call to a vLLM server failed: unreachable, timed out, or answered with an unexpected status (the
    message names the server, the route, the status and vLLM's own message)."""


class VllmServer:
    """One vLLM server at ``url`` (its root, ``http://host:port``); ``token`` its ``--api-key`` (None: no
    ``Authorization`` header); ``timeout_s`` the limit of one call in seconds."""

    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def loaded_adapters(self) -> dict[str, str]:
        """The LoRA adapters the server has loaded: name → path. Raises :class:`VllmCallFailed`."""
        status, body = await self._call("GET", "/v1/models")
        if status != 200:
            raise self._failed("GET /v1/models", status, body)
        try:
            cards = json.loads(body)["data"]
            return {card["id"]: card.get("root") or "" for card in cards if card.get("parent")}
        except (ValueError, KeyError, TypeError) as exc:
            raise VllmCallFailed(f"{self.url}: GET /v1/models answered no model list: {exc}") from exc

    async def load(self, name: str, path: str) -> None:
        """``POST /v1/load_lora_adapter``; a name already loaded counts as loaded. Raises :class:`VllmCallFailed`."""
        status, body = await self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if status != 200 and not (status == 400 and "already been loaded" in _message(body)):
            raise self._failed(f"load_lora_adapter {name}", status, body)

    async def unload(self, name: str) -> None:
        """``POST /v1/unload_lora_adapter``; a name not loaded counts as unloaded. Raises :class:`VllmCallFailed`."""
        status, body = await self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if status not in (200, 404):
            raise self._failed(f"unload_lora_adapter {name}", status, body)

    async def _call(self, method: str, route: str, body: Any = None) -> tuple[int, str]:
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout, headers=self._headers) as session,
                session.request(method, self.url + route, json=body) as response,
            ):
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise VllmCallFailed(f"{self.url}: {method} {route}: {type(exc).__name__}: {exc}") from exc

    def _failed(self, what: str, status: int, body: str) -> VllmCallFailed:
        return VllmCallFailed(f"{self.url}: {what}: HTTP {status}: {_message(body)[:300]}")


def _message(body: str) -> str:
    """vLLM's error message from either error shape, else the body itself."""
    try:
        raw = json.loads(body)
    except ValueError:
        return body
    if isinstance(raw, dict):
        error = raw.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(raw.get("message"), str):
            return raw["message"]
    return body
