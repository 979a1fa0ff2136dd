"""Freshness: a block appended to a log file → its example retrievable from the VectorIndex.

A daemon runs in this process (``Daemon.run``, the analyzer watching the log directory with
watchfiles). For each of ``--events`` tldr blocks, its two block-log lines (context, executed) are
appended in one write, and the clock runs until the block's id is in ``daemon.index``; writes are
spaced by a random pause, as a person would run cells. The baseline, in the same run and with the
same model, is the unavoidable part of that path done directly: embed the block's query (batch of
one) and upsert it into a VectorIndex. Reports p50 and p99 of both and their ratio. Target: p50
under 1 s on a 2-core machine.

``--format`` picks the log format the blocks are written in: ``blocklog`` (learnerd's own, the default),
``claude-code`` (a transcript: the person's turn, the assistant's Bash ``tool_use``, its ``tool_result``)
or ``codex`` (a rollout: ``session_meta`` once, then ``user_message``, ``exec_command`` call and
``exec_command_end`` per block), each block's lines appended in one write (docs/inputs.md).

Run: ``python benchmarks/bench_freshness.py [--events 200] [--format blocklog|claude-code|codex]``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import (
    EPOCH,
    PEER_TLDR,
    TLDR_INPUT,
    TldrBlock,
    block_lines,
    iter_blocks,
    positive,
    require_tldr,
)
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.daemon.logging import configure_logging
from learnerd.ml.embedders import MiniLMEmbedder
from learnerd.store.vector_index import VectorIndex

SESSION = "0193bench-fresh-0000-0000-000000000000"


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def claude_code_lines(block: TldrBlock, seq: int) -> tuple[str, str]:
    """A Claude Code turn for ``block`` (the person's turn, the Bash tool call, its result) and its block id."""
    t, tool = EPOCH + 3 * seq, f"toolu_{seq:08d}"
    base = {"sessionId": SESSION, "cwd": "/srv/bench", "isSidechain": False}

    def line(kind: str, offset: float, content: object) -> str:
        uuid = f"{seq}-{offset}"
        message = {"role": kind, "content": content}
        return json.dumps({**base, "type": kind, "uuid": uuid, "timestamp": _rfc3339(t + offset), "message": message})

    tool_use = {"type": "tool_use", "id": tool, "name": "Bash", "input": {"command": block.command}}
    result = {"type": "tool_result", "tool_use_id": tool, "content": "", "is_error": False}
    lines = [
        line("user", 0, f"{block.header}\n{block.description}"),
        line("assistant", 1, [tool_use]),
        line("user", 2, [result]),
    ]
    return "\n".join(lines) + "\n", f"claude-code:{SESSION}:{tool}"


def codex_lines(block: TldrBlock, seq: int) -> tuple[str, str]:
    """A Codex rollout turn for ``block`` (user_message, exec_command call, exec_command_end) and its block id;
    the file's ``session_meta`` line comes first."""
    t, call = EPOCH + 3 * seq, f"call_{seq:08d}"

    def line(kind: str, offset: float, payload: dict) -> str:
        return json.dumps({"timestamp": _rfc3339(t + offset), "type": kind, "payload": payload})

    meta = line("session_meta", 0, {"id": SESSION, "cwd": "/srv/bench"}) + "\n" if seq == 1 else ""
    arguments = json.dumps({"cmd": block.command})
    lines = [
        line("event_msg", 0, {"type": "user_message", "message": f"{block.header}\n{block.description}"}),
        line(
            "response_item",
            1,
            {"type": "function_call", "name": "exec_command", "arguments": arguments, "call_id": call},
        ),
        line("event_msg", 2, {"type": "exec_command_end", "call_id": call, "exit_code": 0}),
    ]
    return meta + "\n".join(lines) + "\n", f"codex:{SESSION}:{call}"


def blocklog_lines(block: TldrBlock, seq: int) -> tuple[str, str]:
    return block_lines(block, seq), block.block_id


WRITERS = {"blocklog": blocklog_lines, "claude-code": claude_code_lines, "codex": codex_lines}
"""Per ``--format``: one block's lines in that format, and the id of the block they make."""


def percentiles(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


async def through_daemon(daemon: Daemon, log: Path, blocks: list, rng: random.Random, fmt: str) -> list[float]:
    latencies: list[float] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run, stop)
        while daemon.embeddings is None or not all(q.idle for q in daemon.queues.values()):
            await anyio.sleep(0.05)  # the embedder is loaded and start-up work is done
        for seq, block in enumerate(blocks, start=1):
            text, block_id = WRITERS[fmt](block, seq)
            start = time.perf_counter()
            with log.open("a", encoding="utf-8") as f:
                f.write(text)
            while block_id not in daemon.index:
                await anyio.sleep(0.002)
            latencies.append(time.perf_counter() - start)
            await anyio.sleep(rng.uniform(0.0, 0.2))
        stop.set()
    return latencies


def direct(embedder: MiniLMEmbedder, blocks: list) -> list[float]:
    index = VectorIndex(embedder.dim)
    latencies = []
    for block in blocks:
        start = time.perf_counter()
        vector = embedder.embed([f"{block.header}\n\n{block.description}"])
        index.upsert([block.block_id], vector)
        latencies.append(time.perf_counter() - start)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=TLDR_INPUT)
    parser.add_argument("--events", type=positive, default=200)
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR, help="the tldr pages (see below)")
    parser.add_argument("--format", choices=sorted(WRITERS), default="blocklog", help="the log format written")
    args = parser.parse_args()
    require_tldr(args.tldr, parser.prog)
    configure_logging("warning")
    rng = random.Random(7)
    blocks = list(iter_blocks(args.tldr, limit=args.events))[: args.events]
    embedder = MiniLMEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        cfg = Config(state_dir=Path(tmp) / "state", log_dirs=[logs], docs_dirs=[Path(tmp) / "docs"])
        cfg.training.enabled = False  # embeddings only: training has its own benchmarks
        daemon = Daemon(cfg, embedder=embedder)
        try:
            fresh = anyio.run(through_daemon, daemon, logs / "live.jsonl", blocks, rng, args.format)
        finally:
            daemon.close()
    base = direct(embedder, blocks)
    (f50, f99), (b50, b99) = percentiles(fresh), percentiles(base)
    print(f"events: {len(blocks)} ({args.format})")
    print(f"baseline (embed one query + index upsert): p50 {b50 * 1000:7.1f} ms   p99 {b99 * 1000:7.1f} ms")
    print(f"append → retrievable through the daemon : p50 {f50 * 1000:7.1f} ms   p99 {f99 * 1000:7.1f} ms")
    print(f"ratio daemon / baseline                  : p50 {f50 / b50:7.2f}      p99 {f99 / b99:7.2f}")
    print(f"target p50 < 1000 ms: {'met' if f50 < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
