"""Ingest throughput: Claude Code transcripts and Codex rollouts against learnerd's block log, same blocks.

Builds, in a temporary directory, about ``--mb`` MB (10^6 bytes; default 100) of Claude Code transcripts and
as much of Codex CLI rollouts, and the same tldr blocks (``benchmarks/tldr_to_blocklog.py``: one block per
tldr example, its page and description the intent, its command the one run) as learnerd block-log JSONL.
Then ingests each directory on a fresh state through learnerd's real intake: the
:class:`~learnerd.analyzer.analyzer.Analyzer` of ``learnerd run --once`` and backfill with the daemon's settings and
its secret redactor (``Config()``'s ``[analyzer]``, ``[privacy]`` and ``[suggestions] join_window_s``), from
the first byte up to the blocks and watermarks committed in SQLite. Embedding is left out: it costs the same
per block whatever format the block came in (the same blocks, the same query text) and is measured by
``bench_embedding_throughput.py``; including it would dilute the difference this benchmark is about.

Each transcript reproduces the real samples' shape (``../shared/peer-data/assistant-logs/``, see
``--samples``): per block, the person's turn, the assistant's shell tool call and its result are the
samples' own lines (every field kept: usage, model, ``toolUseResult`` output, Codex's ``exec_command_end``
with its aggregated output) with the tldr intent and command put in, followed by the samples' other lines
(non-shell tool calls and results, reasoning, token counts, …) cycled in their order, as many per block as
the samples have per shell call; one session (one file) per as many blocks as a sample session has shell
calls, Codex's ``session_meta`` (with its base instructions) opening each file. So bytes per block, lines
per block and the share of lines that carry nothing are the samples'.

One session of each format and its blocks as a block log are ingested first, unmeasured (imports, the
redactor's plugins). Reports per format: MB, lines, blocks, seconds, MB/s and blocks/s, and each transcript
format's ratio to the block log measured in the same run. The target (issue 23): a 100 MB transcript
directory ingests at ≥ 0.8× the block-log rate, in MB/s. Each directory is checked to give every block
with no malformed line (else exit 1).

Run: ``python benchmarks/bench_ingest.py [--mb 100] [--tldr DIR] [--samples DIR]`` (the smoke test:
``--mb 2``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import EPOCH, PEER_TLDR, TLDR_INPUT, TldrBlock, block_lines, iter_blocks, require_tldr
from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.claude_code import SHELL_TOOL
from learnerd.analyzer.codex import SHELL_FUNCTIONS
from learnerd.daemon.config import Config
from learnerd.daemon.logging import configure_logging
from learnerd.privacy.redact import Redactor
from learnerd.store.db import connect

PEER_SAMPLES = PEER_TLDR.parent / "assistant-logs"
SAMPLES_INPUT = (
    "And the real assistant logs, SAMPLES/claude-code/*.jsonl and SAMPLES/codex/*.jsonl (default --samples: "
    "../shared/peer-data/assistant-logs beside the checkout); exits 2 without them."
)
MB = 1_000_000
BLOCKLOG_PER_FILE = 5000
"""Blocks per block-log file (as ``tldr_to_blocklog.py`` writes them)."""

Record = dict[str, Any]


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _records(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _intent(block: TldrBlock) -> str:
    return f"{block.header}\n\n{block.description}"


@dataclass
class Shape:
    """A format's lines, taken from its real samples: the templates of one block's lines and the filler."""

    head: list[Record]  # a session file's first lines (Codex: session_meta)
    block: Callable[[TldrBlock, str, str, float], list[Record]]  # (block, session id, call id, time) → lines
    filler: list[Record]  # the samples' lines that are no turn and no shell call, in order
    calls_per_session: int
    filler_per_block: int


# ------------------------------------------------------------------------------------------ Claude Code


def _parts(record: Record) -> list[Record]:
    content = (record.get("message") or {}).get("content")
    return content if isinstance(content, list) else []


def claude_code_shape(samples: Path) -> Shape:
    """The Claude Code transcripts of ``samples``/claude-code as a :class:`Shape`."""
    files = sorted((samples / "claude-code").glob("*.jsonl"))
    records = [r for f in files for r in _records(f)]
    bash = {p["id"] for r in records for p in _parts(r) if p.get("type") == "tool_use" and p.get("name") == SHELL_TOOL}

    def is_turn(r: Record) -> bool:
        return r.get("type") == "user" and isinstance((r.get("message") or {}).get("content"), str)

    def is_bash(r: Record) -> bool:
        return any(p.get("id") in bash or p.get("tool_use_id") in bash for p in _parts(r))

    turn = next(r for r in records if is_turn(r) and not r.get("isMeta"))
    call = next(r for r in records if r.get("type") == "assistant" and is_bash(r))
    call_part = next(p for p in _parts(call) if p.get("name") == SHELL_TOOL)
    result = next(
        r for r in records if any(p.get("tool_use_id") == call_part["id"] and not p.get("is_error") for p in _parts(r))
    )
    result_part = next(p for p in _parts(result) if p.get("tool_use_id") == call_part["id"])

    def block(b: TldrBlock, session: str, call_id: str, t: float) -> list[Record]:
        common = {"sessionId": session, "isSidechain": False}
        person = {**turn, **common, "uuid": f"{call_id}-u", "timestamp": _rfc3339(t)}
        person["message"] = {**turn["message"], "content": _intent(b)}
        tool_use = {**call_part, "id": call_id, "input": {**call_part["input"], "command": b.command}}
        assistant = {**call, **common, "uuid": f"{call_id}-a", "timestamp": _rfc3339(t + 1)}
        assistant["message"] = {**call["message"], "content": [tool_use]}
        ran = {**result, **common, "uuid": f"{call_id}-r", "timestamp": _rfc3339(t + 2)}
        ran["message"] = {**result["message"], "content": [{**result_part, "tool_use_id": call_id}]}
        return [person, assistant, ran]

    filler = [r for r in records if not is_turn(r) and not is_bash(r)]
    sessions = max(1, len({r.get("sessionId") for r in records}))
    return Shape([], block, filler, max(1, round(len(bash) / sessions)), round(len(filler) / len(bash)))


# ------------------------------------------------------------------------------------------------ Codex


def codex_shape(samples: Path) -> Shape:
    """The Codex CLI rollouts of ``samples``/codex as a :class:`Shape` (the CLI rollout's ``exec_command``
    lines, which the Desktop's lack, give the templates)."""
    files = sorted((samples / "codex").glob("*.jsonl"))
    per_file = [_records(f) for f in files]
    records = [r for rs in per_file for r in rs]

    def payload(r: Record) -> Record:
        return r.get("payload") or {}

    calls = {
        payload(r)["call_id"]
        for r in records
        if payload(r).get("type") == "function_call" and payload(r).get("name") in SHELL_FUNCTIONS
    }

    def is_turn(r: Record) -> bool:
        return r.get("type") == "event_msg" and payload(r).get("type") == "user_message"

    def is_shell(r: Record) -> bool:
        return payload(r).get("call_id") in calls

    def first(test: Callable[[Record], bool]) -> Record:
        return next(r for r in records if test(r))

    meta = next(rs[0] for rs in per_file if any(payload(r).get("type") == "exec_command_end" for r in rs))
    turn = first(is_turn)
    end = first(lambda r: payload(r).get("type") == "exec_command_end" and payload(r).get("exit_code") == 0)
    call = first(
        lambda r: payload(r).get("type") == "function_call" and payload(r).get("call_id") == payload(end)["call_id"]
    )
    output = first(
        lambda r: (
            payload(r).get("type") == "function_call_output"
            and "Process exited with code 0" in str(payload(r).get("output"))
        )
    )
    shell = payload(end)["command"][:2]  # [shell, "-lc"]

    def block(b: TldrBlock, session: str, call_id: str, t: float) -> list[Record]:
        arguments = {**json.loads(payload(call)["arguments"]), "cmd": b.command}
        return [
            {**turn, "timestamp": _rfc3339(t), "payload": {**payload(turn), "message": _intent(b)}},
            {
                **call,
                "timestamp": _rfc3339(t + 1),
                "payload": {**payload(call), "call_id": call_id, "arguments": json.dumps(arguments)},
            },
            {**output, "timestamp": _rfc3339(t + 2), "payload": {**payload(output), "call_id": call_id}},
            {
                **end,
                "timestamp": _rfc3339(t + 2),
                "payload": {**payload(end), "call_id": call_id, "command": [*shell, b.command]},
            },
        ]

    filler = [r for r in records if r.get("type") != "session_meta" and not is_turn(r) and not is_shell(r)]
    head = [meta]
    return Shape(head, block, filler, max(1, round(len(calls) / len(files))), round(len(filler) / len(calls)))


# ------------------------------------------------------------------------------------------ the files


def unique_blocks(tldr: Path) -> Iterator[TldrBlock]:
    """The tldr blocks, again and again, each round's ids made unique."""
    blocks = list(iter_blocks(tldr))
    for round_ in itertools.count():
        for b in blocks:
            yield b if round_ == 0 else replace(b, block_id=f"{b.block_id}/{round_}")


def write_transcripts(
    fmt: str, shape: Shape, blocks: Iterator[TldrBlock], out: Path, target_bytes: int
) -> tuple[list[TldrBlock], int]:
    """Sessions of ``shape`` in ``out`` until ``target_bytes`` are written; the blocks used and the bytes."""
    out.mkdir(parents=True)
    used: list[TldrBlock] = []
    filler = itertools.cycle(shape.filler)
    written = 0
    for n in itertools.count():
        session = str(uuid.uuid5(uuid.NAMESPACE_URL, f"learnerd-bench-ingest/{fmt}/{n}"))
        lines = [{**r, "payload": {**r["payload"], "id": session}} if fmt == "codex" else r for r in shape.head]
        for _ in range(shape.calls_per_session):
            b = next(blocks)
            used.append(b)
            t = EPOCH + 10 * len(used)
            lines += shape.block(b, session, f"call_{len(used):08d}", t)
            for _ in range(shape.filler_per_block):
                r = next(filler)
                lines.append({**r, "sessionId": session} if "sessionId" in r else r)
        text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in lines)
        path = out / f"{fmt}-{n:05d}.jsonl"
        path.write_text(text, encoding="utf-8")
        written += path.stat().st_size
        if written >= target_bytes:
            return used, written
    raise AssertionError("unreachable")


def write_blocklog(blocks: list[TldrBlock], out: Path) -> int:
    """``blocks`` as block-log JSONL files in ``out``; the bytes written."""
    out.mkdir(parents=True)
    written = 0
    for start in range(0, len(blocks), BLOCKLOG_PER_FILE):
        chunk = blocks[start : start + BLOCKLOG_PER_FILE]
        text = "".join(block_lines(b, start + i + 1) for i, b in enumerate(chunk))
        path = out / f"blocklog-{start // BLOCKLOG_PER_FILE:05d}.jsonl"
        path.write_text(text, encoding="utf-8")
        written += path.stat().st_size
    return written


# ------------------------------------------------------------------------------------------ measuring


@dataclass
class Measured:
    fmt: str
    bytes: int
    lines: int
    blocks: int
    seconds: float
    malformed: int

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds

    @property
    def blocks_per_s(self) -> float:
        return self.blocks / self.seconds


def ingest(fmt: str, logs: Path, state: Path) -> Measured:
    """Ingest ``logs`` on the fresh state ``state`` through the analyzer, timed; what it measured."""
    cfg = Config(state_dir=state, log_dirs=[logs], docs_dirs=[state / "docs"])
    conn = connect(cfg.layout.db_path)
    analyzer = Analyzer(
        conn,
        [logs],
        lambda _block_id: None,
        cfg.analyzer,
        redactor=Redactor(cfg.privacy),
        join_window_s=cfg.suggestions.join_window_s,
    )
    try:
        start = time.perf_counter()
        stats = anyio.run(analyzer.sync)
        seconds = time.perf_counter() - start
        blocks = conn.execute("SELECT count(*) FROM blocks WHERE executed IS NOT NULL").fetchone()[0]
    finally:
        analyzer.close()
        conn.close()
    return Measured(fmt, stats.bytes_read, stats.lines_read, blocks, seconds, stats.malformed_lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=f"{TLDR_INPUT} {SAMPLES_INPUT}")
    parser.add_argument("--mb", type=float, default=100.0, help="MB (10^6 bytes) of each transcript format")
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR, help="the tldr pages (see below)")
    parser.add_argument("--samples", type=Path, default=PEER_SAMPLES, help="the real assistant logs (shapes)")
    args = parser.parse_args()
    if args.mb <= 0:
        parser.error("--mb must be positive")
    require_tldr(args.tldr, parser.prog)
    if not (args.samples / "claude-code").is_dir() or not (args.samples / "codex").is_dir():
        parser.error(f"no claude-code/ and codex/ samples under {args.samples}")
    configure_logging("warning")
    shapes = {"claude-code": claude_code_shape(args.samples), "codex": codex_shape(args.samples)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        expected: dict[str, int] = {}
        blocks = unique_blocks(args.tldr)
        for fmt, shape in shapes.items():  # warm-up: imports, the redactor's plugins, SQLite's first pages
            used, _ = write_transcripts(fmt, shape, blocks, root / "warm-up" / fmt, 1)
            write_blocklog(used, root / "warm-up" / f"blocklog-{fmt}")
            for name in (fmt, f"blocklog-{fmt}"):
                ingest(name, root / "warm-up" / name, root / "warm-up-state" / name)
        most: list[TldrBlock] = []
        for fmt, shape in shapes.items():
            used, _ = write_transcripts(fmt, shape, blocks, root / "logs" / fmt, int(args.mb * MB))
            expected[fmt] = len(used)
            most = max(most, used, key=len)
        # the block log holds as many tldr blocks as the larger transcript directory
        expected["blocklog"] = len(most)
        write_blocklog(most, root / "logs" / "blocklog")
        results = [ingest(fmt, root / "logs" / fmt, root / "state" / fmt) for fmt in ("blocklog", *shapes)]
    base = results[0]
    print(f"{'format':<12} {'MB':>8} {'lines':>9} {'blocks':>8} {'s':>8} {'MB/s':>8} {'blocks/s':>9}"
          f" {'MB/s ratio':>10} {'blocks/s ratio':>14}")  # fmt: skip
    for m in results:
        print(
            f"{m.fmt:<12} {m.bytes / MB:8.1f} {m.lines:9,} {m.blocks:8,} {m.seconds:8.2f} {m.mb_per_s:8.2f}"
            f" {m.blocks_per_s:9,.0f} {m.mb_per_s / base.mb_per_s:10.2f} {m.blocks_per_s / base.blocks_per_s:14.2f}"
        )
    for m in results[1:]:
        verdict = "met" if m.mb_per_s >= 0.8 * base.mb_per_s else "NOT met"
        print(f"target {m.fmt} MB/s ≥ 0.8 × block log: {verdict}")
    bad = [m.fmt for m in results if m.malformed or m.blocks != expected[m.fmt]]
    if bad:
        print(f"error: {', '.join(bad)}: malformed lines, or not one block per tldr example", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
