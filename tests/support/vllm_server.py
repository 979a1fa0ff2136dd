"""A real local HTTP server speaking vLLM's runtime LoRA API, for tests (vLLM cannot run here).

The shapes are those of vLLM's OpenAI-compatible server (``vllm/entrypoints/openai/api_server.py``,
``serving_models.py``, ``protocol.py``): ``GET /v1/models`` lists the base model (``parent`` null) and each
loaded LoRA (``id`` its name, ``root`` its path, ``parent`` the base); ``POST /v1/load_lora_adapter``
``{"lora_name", "lora_path"}`` answers 200 with vLLM's plain-text success line, 400 with vLLM's JSON error for
a missing field or a name already loaded; ``POST /v1/unload_lora_adapter`` ``{"lora_name"}`` answers 200, or
404 for a name not loaded; with a key (``--api-key``) a request without ``Authorization: Bearer <key>``
gets 401 ``{"error": "Unauthorized"}``. ``fail_next`` makes the next that many requests answer 503 (a server
restarting).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.openai_server import serve_routes

BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass
class VllmServer:
    """``url`` the server's root; ``calls`` every request as ``(route, body)``; ``loaded`` name → path."""

    url: str
    calls: list[tuple[str, dict]] = field(default_factory=list)
    loaded: dict[str, str] = field(default_factory=dict)
    fail_next: int = 0

    def loads(self) -> list[str]:
        return [body["lora_name"] for route, body in self.calls if route == "/v1/load_lora_adapter"]

    def unloads(self) -> list[str]:
        return [body["lora_name"] for route, body in self.calls if route == "/v1/unload_lora_adapter"]


def _error(message: str, kind: str, status: int) -> web.Response:
    error = {"message": message, "type": kind, "param": None, "code": status}
    return web.json_response({"error": error}, status=status)


@contextmanager
def vllm_server(api_key: str | None = None) -> Iterator[VllmServer]:
    """Serve vLLM's LoRA routes on an ephemeral 127.0.0.1 port; stop it on exit."""
    state = VllmServer(url="")

    def guard(request: web.Request) -> web.Response | None:
        if state.fail_next > 0:
            state.fail_next -= 1
            return web.Response(status=503, text="Service Unavailable")
        if api_key is not None and request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    async def models(request: web.Request) -> web.Response:
        state.calls.append((request.path, {}))
        if (refused := guard(request)) is not None:
            return refused
        created = int(time.time())
        cards = [{"id": BASE_MODEL, "object": "model", "created": created, "owned_by": "vllm", "root": BASE_MODEL,
                  "parent": None, "max_model_len": 8192, "permission": []}]  # fmt: skip
        cards += [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": path,
             "parent": BASE_MODEL, "max_model_len": None, "permission": []}
            for name, path in state.loaded.items()
        ]  # fmt: skip
        return web.json_response({"object": "list", "data": cards})

    async def load(request: web.Request) -> web.Response:
        body = await request.json()
        state.calls.append((request.path, body))
        if (refused := guard(request)) is not None:
            return refused
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _error("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if name in state.loaded:
            return _error(f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput", 400)
        state.loaded[name] = path
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: web.Request) -> web.Response:
        body = await request.json()
        state.calls.append((request.path, body))
        if (refused := guard(request)) is not None:
            return refused
        name = body.get("lora_name")
        if name not in state.loaded:
            return _error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del state.loaded[name]
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    routes = [
        web.get("/v1/models", models),
        web.post("/v1/load_lora_adapter", load),
        web.post("/v1/unload_lora_adapter", unload),
    ]
    with serve_routes(routes) as base_url:
        state.url = base_url.removesuffix("/v1")
        yield state
