"""``POST /v1/blocks`` on a real aiohttp RPC server on 127.0.0.1: the limits it shares with ``inject_probe`` (64 KiB,
413; the body deadline, 408; 405 for another method) and 503 when the events cannot be written — each refusal
writes nothing and is counted by outcome."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import anyio
import pytest
from prometheus_client import CollectorRegistry

from learnerd.api.blocks import BLOCKS_PATH, BlocksEndpoint
from learnerd.api.http import ServerLimits
from learnerd.api.rpc import MAX_BODY_BYTES, RpcServer
from learnerd.sources.probe_inbox import ProbeInbox
from learnerd.store.ingest_log import IngestLog
from learnerd.store.probe_journal import ProbeJournal
from tests.support.hostile import connect, read_all, request_bytes

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def executed(command: str, block_id: str = "b1") -> dict:
    return {
        "learnerd": 1, "type": "executed", "block_id": block_id, "time": 1714564800.0,
        "cell": {"kind": "code", "language": "bash", "text": command}, "exit_code": 0,
    }  # fmt: skip


class Served:
    def __init__(self, tmp_path: Path, limits: ServerLimits | None = None) -> None:
        self.registry = CollectorRegistry()
        self.ingest = IngestLog(tmp_path / "ingest")
        self.inbox = ProbeInbox(ProbeJournal(tmp_path / "journal.jsonl"))
        blocks = BlocksEndpoint(self.ingest, max_line_bytes=4 * 1024 * 1024, registry=self.registry)
        document = str(tmp_path / "docs" / "learned.dlm")
        self.server = RpcServer(
            self.inbox, token=TOKEN, document=document, eta=lambda doc: 1.0, limits=limits, blocks=blocks
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}{BLOCKS_PATH}"

    def written(self) -> str:
        return "".join(p.read_text() for p in self.ingest.directory.glob("*.jsonl"))

    def count(self, outcome: str) -> float:
        return self.registry.get_sample_value("learnerd_rpc_block_requests_total", {"outcome": outcome}) or 0.0


async def serving(served: Served, body) -> None:
    async with anyio.create_task_group() as tg:
        await tg.start(served.inbox.run)
        await tg.start(served.server.serve)
        await body()
        tg.cancel_scope.cancel()


async def test_413_over_64_kib_and_exactly_64_kib_is_accepted(tmp_path: Path):
    served = Served(tmp_path)

    def padded(size: int) -> bytes:
        skeleton = json.dumps([executed("")]).encode()
        return json.dumps([executed("x" * (size - len(skeleton)))]).encode()

    async def chunks(data: bytes):
        for i in range(0, len(data), 4096):
            yield data[i : i + 4096]

    async def body() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.post(served.url, data=padded(MAX_BODY_BYTES + 1), headers=AUTH) as r:
                assert r.status == 413 and "65536" in (await r.json())["error"]
            async with session.post(served.url, data=chunks(padded(MAX_BODY_BYTES + 1)), headers=AUTH) as r:
                assert r.status == 413  # chunked, no Content-Length: cut off as it passes the cap
            assert served.written() == ""
            async with session.post(served.url, data=padded(MAX_BODY_BYTES), headers=AUTH) as r:
                assert r.status == 200 and (await r.json())["accepted"] == 1
        assert served.count("too_large") == 2 and served.count("accepted") == 1

    await serving(served, body)


async def test_408_when_the_body_does_not_arrive_in_time(tmp_path: Path):
    served = Served(tmp_path, ServerLimits(body_timeout_s=0.5))

    async def body() -> None:
        whole = json.dumps([executed("ls")]).encode()
        head = request_bytes("POST", BLOCKS_PATH, whole, {"Authorization": f"Bearer {TOKEN}".encode()})[: -len(whole)]
        async with await connect(("127.0.0.1", served.server.port)) as stream:
            await stream.send(head + whole[:20])  # part of the body, then silence
            with anyio.fail_after(30):
                answer = await read_all(stream)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
        assert served.written() == "" and served.count("timeout") == 1

    await serving(served, body)


async def test_405_for_another_method_and_503_when_the_events_cannot_be_written(tmp_path: Path):
    served = Served(tmp_path)

    async def body() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(served.url, headers=AUTH) as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
            served.ingest.directory.rmdir()
            served.ingest.directory.write_text("")  # a file where the directory was: every append fails
            async with session.post(served.url, json=[executed("ls")], headers=AUTH) as r:
                assert r.status == 503 and "not written" in (await r.json())["error"]
        assert served.count("unavailable") == 1 and served.count("accepted") == 0

    await serving(served, body)
