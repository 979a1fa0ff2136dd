"""Issue 14, the search surface (``POST /search`` over TCP behind a bearer token, and on the admin socket):
hostile headers, bodies and load against a real daemon service (real MiniLM, real sockets).

Cases: 5 (a non-UTF-8 byte in ``Authorization`` gave 500 before authentication), 6 (deeply nested JSON,
a 5,000-digit ``k`` and a lone surrogate in ``text`` gave 500), 13 (searches queued without bound; idle
connections held forever).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import aiohttp
import anyio
import numpy as np
import pytest

from learnerd.api.http import ServerLimits
from learnerd.daemon.service import ServiceOptions
from tests.support.daemon import daemon_config, eventually, running_service
from tests.support.hostile import NON_UTF8_TOKEN, connect, nested, raw_request, read_all, request_bytes, with_raw

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token-of-32-characters-xx"
BEARER = f"Bearer {TOKEN}".encode()

HOSTILE_BODIES = [
    (nested(1_000), "levels deep"),
    (b'{"text": "x", "k": ' + nested(20_000) + b"}", "levels deep"),
    (with_raw({"text": "x"}, "k", "9" * 5000), "digits"),
    (with_raw({"text": "x"}, "k", "1e999"), "finite"),
    (with_raw({"k": 1}, "text", '"a lone \\ud800 surrogate"'), "surrogate"),
    (b'{"text": "x", "\\udc00": 1}', "surrogate"),
]


def options(**limits: float) -> ServiceOptions:
    return ServiceOptions(search_addr=("127.0.0.1", 0), search_token=TOKEN, limits=ServerLimits(**limits))


def tcp_address(running) -> tuple[str, int]:
    host_port = running.service.control.endpoints["search"].split("//")[1].split("/")[0]
    host, port = host_port.rsplit(":", 1)
    return host, int(port)


# ---------------------------------------------------------------- case 5


async def test_case5_a_non_utf8_authorization_byte_is_401(short_root: Path, minilm):
    async with running_service(daemon_config(short_root), minilm, options()) as running:
        request = request_bytes("POST", "/search", b'{"text": "x"}', {"Authorization": NON_UTF8_TOKEN})
        status, answer = await raw_request(tcp_address(running), request)
        assert status == 401 and b"unauthorized" in answer


# ---------------------------------------------------------------- case 6


async def test_case6_hostile_bodies_are_400_over_tcp_and_on_the_socket(short_root: Path, minilm):
    async with running_service(daemon_config(short_root), minilm, options()) as running:
        for body, needle in HOSTILE_BODIES:
            for where, headers in ((tcp_address(running), {"Authorization": BEARER}), (running.socket, {})):
                status, answer = await raw_request(where, request_bytes("POST", "/search", body, headers))
                assert status == 400 and needle in json.loads(answer)["error"], (body[:60], where, answer)
        status, answer = await raw_request(running.socket, request_bytes("POST", "/search", b'{"text": "ls"}'))
        assert status == 200 and json.loads(answer) == [], "still serving (nothing learned yet)"


# ---------------------------------------------------------------- case 13


class GatedEmbedder:
    """The real MiniLM behind a gate the test opens and closes: closed, a search waits in its thread (a
    slow search under load, made deterministic)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.gate = threading.Event()
        self.gate.set()

    @property
    def calls(self) -> int:
        return self.inner.calls

    def embed(self, texts) -> np.ndarray:
        self.gate.wait()
        return self.inner.embed(texts)


async def test_case13_searches_past_the_queue_bound_get_429_with_retry_after(short_root: Path, minilm):
    embedder = GatedEmbedder(minilm)
    async with running_service(daemon_config(short_root), embedder, options()) as running:
        bound = running.service.control.max_pending_searches
        extra = 10
        statuses: Counter = Counter()
        retry_after: set[str | None] = set()

        async def search(session: aiohttp.ClientSession, url: str) -> None:
            async with session.post(url, json={"text": "list files"}, headers={"Authorization": BEARER.decode()}) as r:
                statuses[r.status] += 1
                if r.status == 429:
                    retry_after.add(r.headers.get("Retry-After"))

        url = running.service.control.endpoints["search"]
        embedder.gate.clear()
        try:
            async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
                for _ in range(bound + extra):
                    tg.start_soon(search, session, url)

                async def refused_all_extra() -> bool:
                    return statuses[429] == extra

                await eventually(refused_all_extra, what="the searches past the bound refused")
                embedder.gate.set()
        finally:
            embedder.gate.set()
        assert statuses == {200: bound, 429: extra} and retry_after == {"1"}


async def test_case13_idle_and_slow_connections_are_closed_on_both_listeners(short_root: Path, minilm):
    async with running_service(daemon_config(short_root), minilm, options(keepalive_timeout_s=0.5)) as running:
        for where in (tcp_address(running), running.socket):
            async with await connect(where) as idle, await connect(where) as slow:
                await slow.send(b"POST /search HTTP/1.1\r\nHost: learnerd\r\n")  # headers never finished
                with anyio.fail_after(30):  # generous: both are closed after 0.5 s
                    assert await read_all(idle) == b""
                    assert await read_all(slow) == b""


# ---------------------------------------------------------------- issue 60: large refused bodies


async def test_large_refused_bodies_are_parsed_off_the_event_loop(short_root: Path, minilm):
    """16 bodies of 1 MB that are refused (400: nested a million levels deep) once parsed: a body over 64 KiB is
    parsed in a worker thread, one at a time (``big_body_parser``), never on the event loop. Holding that one
    slot, the 16 wait — and a search is answered meanwhile, as is everything else the loop serves."""
    from learnerd.api.http import big_body_parser

    cfg = daemon_config(short_root)
    cfg.admin.max_body_bytes = 2 * 1024 * 1024  # bodies of 1 MB are read (the OpenAI endpoint's cap is 1 MiB)
    hostile = b'{"text": "x", "k": ' + b"[" * 1_000_000 + b"}"
    refused: list[tuple[int, bytes]] = []
    async with running_service(cfg, minilm, options()) as running:
        address = tcp_address(running)
        async with anyio.create_task_group() as tg:
            parser = big_body_parser()
            async with parser:  # the parser's one slot: the large bodies wait for it

                async def send_hostile() -> None:
                    refused.append(await raw_request(address, request_bytes("POST", "/search", hostile, AUTH)))

                async def all_read_and_waiting() -> bool:
                    return parser.statistics().tasks_waiting == 16

                for _ in range(16):
                    tg.start_soon(send_hostile)
                await eventually(all_read_and_waiting, what="16 large bodies read, waiting for the parser")
                small = request_bytes("POST", "/search", b'{"text": "list files", "k": 1}', AUTH)
                status, answer = await raw_request(address, small)
                assert status == 200 and isinstance(json.loads(answer), list)
                assert refused == [], "no large body was parsed while the parser's slot was held"
        assert len(refused) == 16 and all(s == 400 and b"levels deep" in body for s, body in refused)


AUTH = {"Authorization": BEARER}
