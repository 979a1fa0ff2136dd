"""Real local HTTP servers speaking OpenAI's protocols, for tests: ``POST /v1/embeddings`` and
``POST /v1/chat/completions``.

Each runs an aiohttp application on 127.0.0.1 in a background thread (its own event loop), so both
synchronous clients (the ``openai`` package) and async code can call it. Embedding vectors are a
deterministic function of the text (a seeded random projection), so equal texts give equal vectors;
chat replies come from a function of the request body that the test supplies.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from aiohttp import web


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32).tolist()


@contextmanager
def serve_routes(routes: list[web.RouteDef]) -> Iterator[str]:
    """Serve ``routes`` on an ephemeral 127.0.0.1 port; yield the base URL ``http://127.0.0.1:PORT/v1``."""
    loop = asyncio.new_event_loop()
    state: dict = {}

    async def start() -> None:
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runner"] = runner
        state["port"] = runner.addresses[0][1]

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield f"http://127.0.0.1:{state['port']}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class EmbeddingsServer:
    base_url: str
    requests: list[dict] = field(default_factory=list)

    @property
    def texts_embedded(self) -> int:
        return sum(len(r["input"]) for r in self.requests)


@contextmanager
def embeddings_server(dim: int = 16) -> Iterator[EmbeddingsServer]:
    """Serve ``/v1/embeddings`` on an ephemeral 127.0.0.1 port; stop it on exit."""
    requests: list[dict] = []

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        requests.append({"model": body["model"], "input": inputs})
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(inputs)]
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0}}
        )

    with serve_routes([web.post("/v1/embeddings", embeddings)]) as base_url:
        yield EmbeddingsServer(base_url=base_url, requests=requests)


@dataclass
class ChatServer:
    """``requests``: every request body received, in order (the JSON the client sent)."""

    base_url: str
    requests: list[dict] = field(default_factory=list)


@contextmanager
def chat_server(reply: Callable[[dict], str]) -> Iterator[ChatServer]:
    """Serve ``/v1/chat/completions``: each request is answered with one assistant message whose content
    is ``reply(request body)``, in OpenAI's ``chat.completion`` shape."""
    requests: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        requests.append(body)
        content = reply(body)
        return web.json_response(
            {
                "id": f"chatcmpl-{len(requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        )

    with serve_routes([web.post("/v1/chat/completions", completions)]) as base_url:
        yield ChatServer(base_url=base_url, requests=requests)


def strict_schema_problem(schema: dict, where: str = "schema") -> str | None:
    """Why ``schema`` breaks OpenAI's structured-outputs strict mode, or None: every object schema must
    set ``additionalProperties: false`` and list every property in ``required``
    (https://platform.openai.com/docs/guides/structured-outputs#supported-schemas)."""
    if schema.get("type") == "object":
        if schema.get("additionalProperties") is not False:
            return f"{where}: additionalProperties must be false"
        properties = schema.get("properties", {})
        if sorted(schema.get("required", [])) != sorted(properties):
            return f"{where}: every property must be required"
        for name, sub in properties.items():
            problem = strict_schema_problem(sub, f"{where}.{name}")
            if problem:
                return problem
    return None


@contextmanager
def structured_chat_server(reply: Callable[[dict, dict], str]) -> Iterator[ChatServer]:
    """``/v1/chat/completions`` as OpenAI's structured outputs serve it: a request without
    ``response_format = {"type": "json_schema", "json_schema": {"name", "strict": true, "schema"}}`` or
    with a schema strict mode refuses gets HTTP 400 with OpenAI's error object; an accepted one is
    answered with ``reply(request body, schema)``."""

    def answer(body: dict) -> str:
        fmt = body.get("response_format") or {}
        spec = fmt.get("json_schema") or {}
        problem = None
        if fmt.get("type") != "json_schema" or spec.get("strict") is not True or not spec.get("name"):
            problem = "response_format must be a strict json_schema with a name"
        else:
            problem = strict_schema_problem(spec.get("schema") or {})
        if problem:
            raise web.HTTPBadRequest(
                text=json.dumps(
                    {"error": {"message": problem, "type": "invalid_request_error", "param": "response_format"}}
                ),
                content_type="application/json",
            )
        return reply(body, spec["schema"])

    with chat_server(answer) as server:
        yield server


def _serve_steered(argv: list[str] | None = None) -> None:
    """``python -m tests.support.openai_server --port P --steering FILE [--ready-after S]``: a stand-in for
    an inference server started with a steering file (what ``[steering.server] start`` runs). ``GET
    /health`` answers 503 for the first ``--ready-after`` seconds, then 200; each chat completion is
    answered ``"eos=<cluster 0's delta> <the question>"``. It prints one line per event (its pid, the
    file, each health answer) and exits 0 on SIGTERM."""
    import argparse
    import os
    import signal
    import time

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--steering", required=True)
    parser.add_argument("--ready-after", type=float, default=0.0)
    args = parser.parse_args(argv)
    deltas = json.loads(open(args.steering, encoding="utf-8").read())["deltas"]  # noqa: SIM115
    ready_at = time.monotonic() + args.ready_after
    print(f"started pid={os.getpid()} steering={args.steering} eos={deltas['0']!r}", flush=True)

    async def health(request: web.Request) -> web.Response:
        status = 200 if time.monotonic() >= ready_at else 503
        print(f"health {status}", flush=True)
        return web.Response(status=status, text="ok" if status == 200 else "loading")

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        content = f"eos={deltas['0']!r} {body['messages'][-1]['content']}"
        return web.json_response(
            {
                "id": "chatcmpl-steered",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        )

    def on_term(signum: int, frame: object) -> None:
        print(f"stopping pid={os.getpid()} on {signal.Signals(signum).name}", flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    app = web.Application()
    app.add_routes([web.get("/health", health), web.post("/v1/chat/completions", completions)])
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, handle_signals=False)


if __name__ == "__main__":
    _serve_steered()
