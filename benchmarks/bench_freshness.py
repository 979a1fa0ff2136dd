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

``--answers N`` then measures what a person gets (issue 59, "answer new tasks before any training"): a ``learnerd
run`` daemon (its own process) serving ``docs/learned.dlm`` on SmolLM2-135M-Instruct with the default configuration
and no version trained (``[training] enabled = false``), the endpoint on a free loopback port. For each of ``N``
seeded nl2bash tasks (``../shared/peer-data/nl2bash/paraphrases.jsonl``, chosen as ``bench_learning.py`` chooses
them) its block is appended to the block log, and 5 s later the task's first paraphrase (another annotator's words,
never logged) is asked through the endpoint with the official ``openai`` client's default call (``model="learned"``,
the user message, nothing else). It reports exact matches (the suggested command, as ``bench_learning.py`` reads it,
equal to the logged one) with their 95 % confidence interval, how often the logged example was quoted, what answered
(``learnerd.routed``), and p50/p95 from the log line to the answer and of the request alone.
``--after DIR`` asks them of a trained state instead: a copy of a ``bench_learning.py --out`` directory (its
document, logs and state; the model cache linked), whose served version answers as the endpoint routes each
request, the fresh tasks chosen among the nl2bash commands it has not logged. ``--next-cycle`` then trains them
(``learnerd run --once``, the cycle ``bench_learning.py`` runs without its harvest; ``--threads``) and asks the
same paraphrases again. ``--context-alpha A`` sets the answering daemon's ``[serve] context_alpha`` (0: the answers
without context-aware decoding, to compare with the default's); ``--wait S`` asks each paraphrase ``S`` seconds after
its log line instead of 5 (the task is retrievable about 0.1 s after it; the latency from the log line counts the wait).

Run: ``python benchmarks/bench_freshness.py [--events 200] [--format blocklog|claude-code|codex] [--answers 20]
[--after DIR [--next-cycle]] [--context-alpha A] [--wait S]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from learnerd.analyzer.blocklog import event_line
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.daemon.logging import configure_logging
from learnerd.ml.embedders import MiniLMEmbedder
from learnerd.store.blocks import Block
from learnerd.store.vector_index import VectorIndex
from tests.support.daemon_process import daemon_process, free_port

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


FRESH_WAIT_S = 5.0
"""Seconds between a task's log line and the request that asks it in other words (issue 59; ``--wait``)."""


def fresh_tasks(nl2bash: Path, n: int, seed: int, logged: frozenset[str] = frozenset()) -> list[tuple[Block, str, str]]:
    """``n`` seeded nl2bash tasks as ``(block, paraphrase, command)``: the block learnerd logs (the first
    description, the command) and the first other description learnerd would ask the same way; none of the
    blocks ``logged`` (their ids: what the state learned already)."""
    from benchmarks.bench_learning import choose_nl2bash

    blocks, learned, paraphrases = choose_nl2bash(nl2bash, n + len(logged), seed)
    first = {}
    for item in paraphrases:  # sources nl2bash/<line>/<i>: the first of each line's
        first.setdefault(item.source.rsplit("/", 1)[0], item)
    tasks = [(b, first[b.id].prompt, item.command) for b, item in zip(blocks, learned, strict=True)]
    return [task for task in tasks if task[0].id not in logged][:n]


def logged_blocks(logs: Path) -> frozenset[str]:
    """The ids of the blocks the block logs (``*.jsonl``) under ``logs`` hold."""
    ids = set()
    for path in logs.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            ids.add(json.loads(line)["block_id"])
    return frozenset(ids)


def write_answer_config(root: Path, port: int, context_alpha: float | None = None) -> None:
    """``root``'s config for ``learnerd run`` (:data:`ANSWER_CONFIG`): the endpoint on ``port``, no training;
    ``context_alpha``: its ``[serve] context_alpha`` (None: the default)."""
    from learnerd.ml.base_model import SMOLLM2_INSTRUCT
    from learnerd.store.atomic import atomic_write_text

    text = ANSWER_CONFIG.format(base=SMOLLM2_INSTRUCT, port=port)
    if context_alpha is not None:
        text += f"context_alpha = {context_alpha}\n"
    atomic_write_text(root / "learnerd.toml", text)


LAYOUT = """\
state_dir = "state"
log_dirs = ["logs"]
docs_dirs = ["docs"]
[probes]
base_model = "{base}"
"""
"""Where the state, the logs and ``docs/learned.dlm`` are, on SmolLM2: the start of both configs below."""
ANSWER_CONFIG = (
    LAYOUT
    + """[training]
enabled = false
[serve]
listen = "127.0.0.1:{port}"
"""
)
"""The daemon that answers: ``docs/learned.dlm`` on ``base`` served on ``port``, no training."""
CYCLE_CONFIG = (
    LAYOUT
    + """[training]
num_threads = {threads}
[evaluation]
null_runs = 0
max_prompts = 4
num_threads = {threads}
"""
)
"""``--next-cycle``'s ``learnerd run --once``: the cycle ``bench_learning.py`` runs, without its harvest."""


def new_root(root: Path, after: Path | None) -> None:
    """``root`` laid out for the daemon: a new SmolLM2 document and state, or (``after``) a copy of a
    ``bench_learning.py --out`` directory's document, logs and state, its model cache linked file by file."""
    from learnerd.ml.base_model import SMOLLM2_INSTRUCT
    from learnerd.store.atomic import atomic_write_text
    from learnerd.store.dlm import new_document

    if after is None:
        for sub in ("logs", "docs", "state"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        atomic_write_text(root / "docs" / "learned.dlm", new_document(SMOLLM2_INSTRUCT).to_text())
        return
    for sub in ("logs", "docs"):
        shutil.copytree(after / sub, root / sub)
    shutil.copytree(
        after / "state", root / "state", ignore=lambda d, names: ["models"] if d == str(after / "state") else []
    )
    (root / "state" / "models").mkdir(mode=0o700)
    for entry in (after / "state" / "models").iterdir():
        (root / "state" / "models" / entry.name).symlink_to(entry.resolve())


def fresh_answers(
    nl2bash: Path,
    n: int,
    seed: int,
    after: Path | None = None,
    next_cycle: bool = False,
    threads: int = 2,
    context_alpha: float | None = None,
    wait: float = FRESH_WAIT_S,
) -> dict[str, Any]:
    """Issue 59's freshness figures (the module docstring), as a mapping printed by :func:`main`: ``tasks``
    (each fresh task's row), ``ready_s``, ``wait_s`` (``wait``: seconds from each log line to its question); with
    ``next_cycle``, ``next_cycle``: the ``learnerd run --once`` that
    trained them (``wall_s``, its ``summary``) and the same paraphrases asked again (``tasks``, ``ready_s``)."""
    tasks = fresh_tasks(nl2bash, n, seed, logged_blocks(after / "logs") if after is not None else frozenset())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        new_root(root, after)
        result = ask(root, tasks, log=True, context_alpha=context_alpha, wait=wait)
        if next_cycle:
            from learnerd.ml.base_model import SMOLLM2_INSTRUCT
            from learnerd.store.atomic import atomic_write_text

            config = root / "cycle.toml"
            atomic_write_text(config, CYCLE_CONFIG.format(base=SMOLLM2_INSTRUCT, threads=threads))
            started = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "learnerd", "run", "--once", "--config", str(config)],
                env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(f"learnerd run --once exited {proc.returncode}:\n{proc.stderr[-3000:]}")
            wall = time.perf_counter() - started
            print(f"next cycle: {wall:.0f} s", flush=True)
            result["next_cycle"] = {"wall_s": wall, **ask(root, tasks, log=False, context_alpha=context_alpha)}
    return result


def ask(
    root: Path,
    tasks: list[tuple[Block, str, str]],
    log: bool,
    context_alpha: float | None = None,
    wait: float = FRESH_WAIT_S,
) -> dict[str, Any]:
    """A ``learnerd run`` daemon on ``root`` (:func:`write_answer_config`) asked each task's paraphrase with the
    official client's default call; with ``log``, ``wait`` seconds after appending the task's block to the
    block log. ``{"tasks": rows, "ready_s"}``."""
    import openai

    from benchmarks.bench_learning import suggested
    from learnerd.store.suggestions import normalize_command

    token, port = secrets.token_urlsafe(24), free_port()
    write_answer_config(root, port, context_alpha)
    started = time.perf_counter()
    with daemon_process(root, env={"LEARNERD_OPENAI_TOKEN": token}) as daemon:
        daemon.wait_ready()
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token, max_retries=0, timeout=600)
        api.chat.completions.create(model="learned", messages=[{"role": "user", "content": "hi"}])  # loads it
        ready_s = time.perf_counter() - started
        rows = []
        for seq, (block, paraphrase, command) in enumerate(tasks, start=1):
            logged = time.perf_counter()
            if log:
                t = time.time()
                lines = event_line("context", block.id, t, cells=block.context) + event_line(
                    "executed", block.id, t + 0.5, cell=block.executed, exit_code=0
                )
                with (root / "logs" / "fresh.jsonl").open("a", encoding="utf-8") as f:
                    f.write(lines)
                time.sleep(wait)
            asked = time.perf_counter()
            reply = api.chat.completions.create(model="learned", messages=[{"role": "user", "content": paraphrase}])
            done = time.perf_counter()
            info = (reply.model_extra or {}).get("learnerd", {})
            answer = reply.choices[0].message.content or ""
            rows.append(
                {
                    "exact": suggested(answer) == normalize_command(command),
                    "quoted": any(h.get("answer", "").strip() == command.strip() for h in info.get("retrieved", [])),
                    "routed": info.get("routed"),
                    "adapter": info.get("adapter"),
                    "similarity": info.get("similarity"),
                    "context_alpha": info.get("context_alpha"),
                    "log_to_answer_s": done - logged,
                    "request_s": done - asked,
                    "paraphrase": paraphrase,
                    "command": command,
                    "answer": answer,
                }
            )
            print(
                f"  {seq}/{len(tasks)} exact={rows[-1]['exact']} quoted={rows[-1]['quoted']} "
                f"routed={rows[-1]['routed']} request {done - asked:.1f} s",
                flush=True,
            )
    return {"tasks": rows, "ready_s": ready_s, **({"wait_s": wait} if log else {})}


def print_fresh(result: dict[str, Any]) -> None:
    """The figures of :func:`fresh_answers`' result: per round of questions, exact matches with their 95 % confidence
    interval (Clopper–Pearson, ``scipy.stats.binomtest``), how often the task's example was quoted, who answered, and
    the latencies."""
    from scipy.stats import binomtest

    rounds = [("asked {wait:g} s after their log line, before any training", result, True)]
    if "next_cycle" in result:
        wall = result["next_cycle"]["wall_s"]
        rounds.append((f"asked again after the next cycle trained them ({wall:.0f} s)", result["next_cycle"], False))
    for title, found, logged in rounds:
        rows = found["tasks"]
        n = len(rows)
        exact, quoted = sum(r["exact"] for r in rows), sum(r["quoted"] for r in rows)
        routed = {k: sum(r["routed"] == k for r in rows) for k in ("adapter", "base")}
        served = sorted({str(r.get("adapter")) for r in rows})
        request = np.percentile([r["request_s"] for r in rows], [50, 95])
        low, high = binomtest(exact, n).proportion_ci(0.95, method="exact")
        print(f"fresh tasks in other words, {title.format(wait=found.get('wait_s', FRESH_WAIT_S))}: {n}")
        print(
            f"  exact {exact}/{n} ({exact / n:.0%}, 95 % CI {low:.0%}–{high:.0%}); its example quoted {quoted}/{n}; "
            f"routed {routed}; adapter {served}"
        )
        if logged:
            total = np.percentile([r["log_to_answer_s"] for r in rows], [50, 95])
            print(
                f"  log line → answer: p50 {total[0]:6.1f} s   p95 {total[1]:6.1f} s "
                f"(the {found.get('wait_s', FRESH_WAIT_S):g} s wait included)"
            )
        print(f"  the request alone: p50 {request[0]:6.1f} s   p95 {request[1]:6.1f} s")
        print(f"  (the daemon and SmolLM2 ready after {found['ready_s']:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=TLDR_INPUT)
    parser.add_argument("--events", type=positive, default=200)
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR, help="the tldr pages (see below)")
    parser.add_argument("--format", choices=sorted(WRITERS), default="blocklog", help="the log format written")
    parser.add_argument("--answers", type=int, default=0, help="fresh tasks asked through the endpoint (0: none)")
    parser.add_argument("--json", type=Path, help="write the --answers rows here")
    parser.add_argument(
        "--after",
        type=Path,
        help="--answers on a copy of this bench_learning.py --out directory: its served version answers, and the "
        "fresh tasks are commands it did not learn (default: a new document, no version)",
    )
    parser.add_argument(
        "--next-cycle", action="store_true", help="then train them (learnerd run --once) and ask the same again"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads of --next-cycle's training")
    parser.add_argument(
        "--context-alpha",
        type=float,
        help="the answering daemon's [serve] context_alpha (default: learnerd's; 0: no context-aware decoding)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=FRESH_WAIT_S,
        help=f"seconds from a fresh task's log line to its question (default {FRESH_WAIT_S:g}, issue 59's)",
    )
    args = parser.parse_args()
    if args.wait < 0:
        parser.error(f"--wait must be 0 or more seconds, not {args.wait}")
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
    if args.answers > 0:
        from benchmarks.bench_learning import NL2BASH

        result = fresh_answers(
            NL2BASH,
            args.answers,
            7,
            args.after,
            args.next_cycle,
            args.threads,
            context_alpha=args.context_alpha,
            wait=args.wait,
        )
        print_fresh(result)
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
