"""Hostile HTTP clients for the issue-14 tests and the hostile-load benchmark: raw requests on real
sockets (what an HTTP library would refuse to send), and the bodies that used to give 500."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.abc

#: An ``Authorization`` value holding bytes that are not UTF-8.
NON_UTF8_TOKEN = b"Bearer \xff\xfe-not-utf-8"


def nested(depth: int) -> bytes:
    """``[[[...]]]``, ``depth`` levels (bytes); 1,000 levels go past ``json.loads``'s recursion limit."""
    return b"[" * depth + b"]" * depth


def nested_in(field: str, depth: int, base: dict) -> bytes:
    """``base`` with ``field`` set to an array nested ``depth`` levels deep."""
    text = json.dumps({**base, field: "__HERE__"})
    return text.replace('"__HERE__"', nested(depth).decode()).encode()


def with_raw(base: dict, field: str, raw_json: str) -> bytes:
    """``base`` with ``field``'s value replaced by the literal JSON text ``raw_json`` (a 5,000-digit
    number, a lone surrogate escape ``"\\ud800"``)."""
    text = json.dumps({**base, field: "__HERE__"})
    return text.replace('"__HERE__"', raw_json).encode()


def request_bytes(
    method: str, path: str, body: bytes = b"", headers: dict[str, bytes] | None = None, host: str = "learnerd"
) -> bytes:
    """One HTTP/1.1 request with ``Connection: close`` and a ``Content-Length``; header values are sent as given."""
    lines = [f"{method} {path} HTTP/1.1".encode(), f"Host: {host}".encode(), b"Connection: close"]
    all_headers = {"Content-Type": b"application/json", **(headers or {})}
    lines += [k.encode() + b": " + v for k, v in all_headers.items()]
    lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def connect(where: tuple[str, int] | Path) -> anyio.abc.SocketStream:
    """A stream to a TCP ``(host, port)`` or a Unix socket path."""
    if isinstance(where, Path):
        return await anyio.connect_unix(str(where))
    return await anyio.connect_tcp(*where)


async def read_all(stream: anyio.abc.ByteStream) -> bytes:
    """Everything until the server closes (an abort counts as the end)."""
    data = bytearray()
    try:
        async for chunk in stream:
            data += chunk
    except (anyio.BrokenResourceError, ConnectionResetError):
        pass
    return bytes(data)


async def raw_request(where: tuple[str, int] | Path, request: bytes) -> tuple[int, bytes]:
    """Send ``request``; return the answer's status and body (``Connection: close``: read to the end)."""
    async with await connect(where) as stream:
        await stream.send(request)
        answer = await read_all(stream)
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


def header_of(answer_head: bytes, name: str) -> str | None:
    for line in answer_head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode("latin-1")
    return None
