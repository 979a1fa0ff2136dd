"""A real local HTTP server speaking OpenAI's ``POST /v1/embeddings`` protocol, for tests.

It runs an aiohttp application on 127.0.0.1 in a background thread (its own event loop), so both
synchronous clients (the ``openai`` package) and async code can call it. Vectors are a deterministic
function of the text (a seeded random projection), so equal texts give equal vectors.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from aiohttp import web


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32).tolist()


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
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict = {}

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        server.requests.append({"model": body["model"], "input": inputs})
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dim)} for i, t in enumerate(inputs)]
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 0, "total_tokens": 0}}
        )

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", embeddings)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runner"] = runner
        state["port"] = runner.addresses[0][1]
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    started.wait(10)
    server = EmbeddingsServer(base_url=f"http://127.0.0.1:{state['port']}/v1")
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
