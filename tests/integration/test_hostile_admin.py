"""Issue 14, the admin surface (the Unix socket): hostile bodies and slow clients against a real daemon
service (real MiniLM, raw requests on the real socket).

Case 6 (bodies that gave 500: deeply nested JSON, a 5,000-digit number, non-finite numbers, lone
surrogates — which reached a workqueue as a key) and case 13 (a body that never finishes is 408, the
connection does not stay held).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from learnerd.api.http import ServerLimits
from learnerd.daemon.service import ServiceOptions
from tests.support.daemon import daemon_config, get_json, running_service
from tests.support.hostile import connect, nested, raw_request, read_all, request_bytes, with_raw

pytestmark = pytest.mark.anyio

HOSTILE = [
    ("/pause", nested(1_000), "levels deep"),
    ("/log-level", b'{"level": ' + nested(5_000) + b"}", "levels deep"),
    ("/backfill", with_raw({}, "since", "1" * 5000), "digits"),
    ("/backfill", with_raw({}, "since", "NaN"), "NaN"),
    ("/backfill", with_raw({}, "since", "-1e400"), "finite"),
    ("/requeue", with_raw({"controller": "examples"}, "key", '"\\ud800"'), "surrogate"),
    ("/pause", with_raw({}, "controller", '"examples\\udfff"'), "surrogate"),
]


async def test_case6_hostile_bodies_are_400_and_reach_no_queue(short_root: Path, minilm):
    async with running_service(daemon_config(short_root), minilm) as running:
        for path, body, needle in HOSTILE:
            status, answer = await raw_request(running.socket, request_bytes("POST", path, body))
            assert status == 400 and needle in json.loads(answer)["error"], (path, body[:60], answer)
        async with running.session() as s:
            status = await get_json(s, "/status")
        assert status["state"] == "running" and status["backfill"] is None
        assert not any(c["paused"] for c in status["controllers"].values())
        assert status["controllers"]["examples"]["reconciles"] == 0, "no hostile key reached the examples queue"


async def test_case13_a_body_that_never_finishes_is_408(short_root: Path, minilm):
    options = ServiceOptions(limits=ServerLimits(body_timeout_s=0.5))
    async with running_service(daemon_config(short_root), minilm, options) as running:
        head = request_bytes("POST", "/pause", b"x" * 50)[:-50]
        async with await connect(running.socket) as stream:
            await stream.send(head + b'{"contr')  # 7 of 50 bytes, then silence
            with anyio.fail_after(30):  # generous: the deadline is 0.5 s
                answer = await read_all(stream)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
        async with running.session() as s:
            controllers = (await get_json(s, "/status"))["controllers"]
        assert not any(c["paused"] for c in controllers.values()), "nothing was paused"
