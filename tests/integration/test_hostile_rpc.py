"""Issue 14, the RPC surface (``POST /rpc``): hostile bodies, headers and clients against a real aiohttp
server on 127.0.0.1, real clients (raw sockets where a library would refuse to send the bytes).

Cases: 2 (one probe with a lone surrogate failed its whole group commit), 5 (a non-UTF-8 byte in
``Authorization`` gave 500 before authentication), 6 (deeply nested JSON gave 500), 13 (slow and idle
clients held connections without limit).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import aiohttp
import anyio
import pytest

from learnerd.api.http import ServerLimits
from learnerd.api.rpc import RpcServer
from learnerd.sources.probe_inbox import ProbeInbox
from learnerd.store.probe_journal import InjectedProbe, ProbeJournal
from tests.support.hostile import NON_UTF8_TOKEN, connect, nested, raw_request, read_all, request_bytes, with_raw

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def inject(prompt: str = "How do I list pods?", reference: str = "kubectl get pods", **params) -> dict:
    return {"method": "inject_probe", "params": {"prompt": prompt, "reference": reference, **params}}


class Served:
    def __init__(self, tmp_path: Path, limits: ServerLimits | None = None) -> None:
        self.journal = ProbeJournal(tmp_path / "journal.jsonl")
        self.inbox = ProbeInbox(self.journal)
        document = str(tmp_path / "docs" / "learned.dlm")
        self.server = RpcServer(self.inbox, token=TOKEN, document=document, eta=lambda doc: 1.0, limits=limits)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.server.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/rpc"


async def serving(served: Served, body) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(served.inbox.run)
        await tg.start(served.server.serve)
        await body()
        tg.cancel_scope.cancel()


# ---------------------------------------------------------------- case 2


async def test_case2_a_lone_surrogate_probe_is_refused_alone_and_its_batch_is_journaled(tmp_path: Path):
    served = Served(tmp_path)
    bad = with_raw(inject(), "params", json.dumps({"prompt": "x", "reference": "y"}).replace('"x"', '"\\ud800 q?"'))

    async def body() -> None:
        statuses: Counter = Counter()

        async def push(session: aiohttp.ClientSession, data: bytes, kind: str) -> None:
            async with session.post(served.url, data=data, headers=AUTH) as r:
                statuses[kind, r.status] += 1

        async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(push, session, json.dumps(inject(prompt=f"Honest question {i}?")).encode(), "honest")
                if i == 30:
                    tg.start_soon(push, session, bad, "bad")
        assert statuses == {("honest", 200): 60, ("bad", 400): 1}
        assert sorted(p.prompt for p in served.journal.pending()) == sorted(f"Honest question {i}?" for i in range(60))

    await serving(served, body)


async def test_case2_the_inbox_checks_each_probe_before_its_group_commit(tmp_path: Path):
    journal = ProbeJournal(tmp_path / "journal.jsonl")
    inbox = ProbeInbox(journal)

    def probe(prompt: str) -> InjectedProbe:
        return InjectedProbe(InjectedProbe.new_id(), "/docs/d.dlm", prompt, "answer")

    outcomes: dict[str, str] = {}

    async def submit(p: InjectedProbe) -> None:
        try:
            await inbox.submit(p)
            outcomes[p.prompt] = "accepted"
        except ValueError:
            outcomes[p.prompt] = "refused"

    async with anyio.create_task_group() as tg:
        await tg.start(inbox.run)
        async with anyio.create_task_group() as pushes:  # submitted together: one group commit
            for i in range(10):
                pushes.start_soon(submit, probe(f"good {i}"))
            pushes.start_soon(submit, probe("bad \ud800"))
        tg.cancel_scope.cancel()
    assert outcomes == {**{f"good {i}": "accepted" for i in range(10)}, "bad \ud800": "refused"}
    assert sorted(p.prompt for p in ProbeJournal(journal.path).pending()) == sorted(f"good {i}" for i in range(10))


# ---------------------------------------------------------------- case 5


async def test_case5_a_non_utf8_authorization_byte_is_401(tmp_path: Path):
    served = Served(tmp_path)

    async def body() -> None:
        request = request_bytes("POST", "/rpc", json.dumps(inject()).encode(), {"Authorization": NON_UTF8_TOKEN})
        status, answer = await raw_request(served.address, request)
        assert status == 401 and b"bearer token" in answer
        assert served.journal.pending() == []

    await serving(served, body)


# ---------------------------------------------------------------- case 6


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (nested(1_000), "levels deep"),
        (nested(30_000), "levels deep"),
        (b'{"method": "inject_probe", "params": ' + nested(5_000) + b"}", "levels deep"),
        (with_raw(inject(), "params", '{"prompt": "q?", "reference": "a", "tags": [' + "9" * 5000 + "]}"), "digits"),
        (with_raw(inject(), "params", '{"prompt": "q?", "reference": "a", "tags": [NaN]}'), "NaN"),
        (with_raw(inject(), "params", '{"prompt": "q?", "reference": "a", "tags": ["\\udfff"]}'), "surrogate"),
    ],
    ids=["nested-1000", "nested-30000", "nested-params", "5000-digits", "nan", "surrogate-tag"],
)
async def test_case6_hostile_json_is_400(tmp_path: Path, payload: bytes, needle: str):
    served = Served(tmp_path)

    async def body() -> None:
        async with aiohttp.ClientSession() as session, session.post(served.url, data=payload, headers=AUTH) as r:
            assert r.status == 400 and needle in (await r.json())["error"]
        assert served.journal.pending() == []

    await serving(served, body)


# ---------------------------------------------------------------- case 13


async def test_case13_a_client_that_never_finishes_its_headers_is_disconnected(tmp_path: Path):
    served = Served(tmp_path, ServerLimits(keepalive_timeout_s=0.5))

    async def body() -> None:
        async with await connect(served.address) as stream:
            await stream.send(b"POST /rpc HTTP/1.1\r\nHost: learnerd\r\n")  # and never the rest
            with anyio.fail_after(30):  # generous: the server closes it after 0.5 s
                assert await read_all(stream) == b""

    await serving(served, body)


async def test_case13_a_body_that_does_not_arrive_in_time_is_408(tmp_path: Path):
    served = Served(tmp_path, ServerLimits(body_timeout_s=0.5))

    async def body() -> None:
        head = request_bytes("POST", "/rpc", b"x" * 100, {"Authorization": f"Bearer {TOKEN}".encode()})[:-100]
        async with await connect(served.address) as stream:
            await stream.send(head + b'{"method": "inj')  # 15 of 100 bytes, then silence
            with anyio.fail_after(30):
                answer = await read_all(stream)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
        assert served.journal.pending() == []

    await serving(served, body)


async def test_case13_the_connection_cap_closes_the_oldest_idle_connections(tmp_path: Path):
    served = Served(tmp_path, ServerLimits(max_connections=4, keepalive_timeout_s=600))

    async def body() -> None:
        idle = [await connect(served.address) for _ in range(10)]
        try:
            async with aiohttp.ClientSession() as session, session.post(served.url, json=inject(), headers=AUTH) as r:
                assert r.status == 200  # served although 10 idle connections came first
            closed = 0
            for stream in idle:
                with anyio.move_on_after(5):
                    closed += await read_all(stream) == b""
            assert closed >= 10 + 1 - 4  # every connection past the cap closed an older one
        finally:
            for stream in idle:
                await stream.aclose()

    await serving(served, body)
