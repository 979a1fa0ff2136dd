"""Warm retrieval latency: ``POST /search`` through a running daemon's admin socket, against the bare
in-process call, at 50k indexed examples.

Set-up (a few minutes on a laptop CPU): ``--real`` tldr examples (default 2000) become block logs and
are ingested and embedded with MiniLM by an in-process ``run --once``. A ``learnerd run`` daemon is
then started in a child process on that state directory; before it serves, its live VectorIndex is
padded with random unit vectors (seeded) up to ``--total`` (default 50,000) — embedding 50k real
texts on a CPU takes far longer, and a latency benchmark only needs the index's size: faiss's exact
search costs the same whatever the vectors hold. Padding ids have no example row, so they never
appear in results (real matches also score far above random vectors).

Measured, interleaved in rounds so both see the same machine load:

* **daemon**: one aiohttp client (keep-alive) sends ``{"text", "k"}`` to the socket and waits for
  the JSON answer — HTTP, the peer-uid check, JSON, the hop to a worker thread, the embedding, the
  faiss search, the SQLite lookup of the hits;
* **baseline**: the same embedder model, the same padded index and the same SQLite lookup, called
  directly in this process (``describe_hits(conn, nearest(embedder, index, text, k), k)``).

The ratio daemon / baseline is the serving overhead. Queries are descriptions of held-out tldr
examples (pages not ingested). Run: ``python benchmarks/bench_search.py`` (``--help`` for knobs).

Absolute latencies depend on the machine far more than on the serving: torch and faiss both run
OpenMP thread pools, and on a small machine that is busy with something else their parallel regions
stall (compare a run under ``OMP_NUM_THREADS=1``). The script prints the CPU count and load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.tldr_to_blocklog import PEER_TLDR, TLDR_INPUT, block_lines, iter_blocks, positive, require_tldr  # noqa: E402
from learnerd.analyzer.settings import AnalyzerConfig  # noqa: E402
from learnerd.daemon.config import Config  # noqa: E402
from learnerd.training.settings import TrainingSettings  # noqa: E402

PAD_SEED = 20240501


def bench_config(root: Path) -> Config:
    """Retrieval only: no training of the learned document (it would compete for the CPU)."""
    return Config(
        state_dir=root / "state",
        log_dirs=[root / "logs"],
        analyzer=AnalyzerConfig(force_polling=True),
        training=TrainingSettings(enabled=False),
    )


def pad_index(index, total: int, dim: int) -> int:
    """Upsert seeded random unit vectors (ids ``pad/<n>``) until ``index`` holds ``total``; return how many."""
    n = max(0, total - len(index))
    rng = np.random.default_rng(PAD_SEED)
    for start in range(0, n, 10_000):
        size = min(10_000, n - start)
        vectors = rng.standard_normal((size, dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.upsert([f"pad/{start + i}" for i in range(size)], vectors)
    return n


def serve(root: Path, total: int) -> None:
    """The child: ``learnerd run`` on ``root`` with its index padded to ``total`` before it serves."""
    import anyio

    from learnerd.cmd.run import serve as serve_with_signals
    from learnerd.daemon.app import Daemon
    from learnerd.daemon.logging import configure_logging
    from learnerd.daemon.service import ServiceOptions
    from learnerd.daemon.statelock import StateLock

    configure_logging("warning")
    with StateLock(root / "state"):
        daemon = Daemon(bench_config(root))
        pad_index(daemon.index, total, 384)
        try:
            anyio.run(serve_with_signals, daemon, False, ServiceOptions())
        finally:
            daemon.close()


def prepare(root: Path, tldr: Path, real: int, embedder) -> list[str]:
    """Ingest and embed ``real`` tldr examples into ``root/state``; return held-out query texts."""
    import anyio

    from learnerd.daemon.app import Daemon

    logs = root / "logs"
    logs.mkdir(parents=True)
    blocks = list(iter_blocks(tldr))
    ingested, held_out = blocks[:real], blocks[real:]
    (logs / "tldr.jsonl").write_text("".join(block_lines(b, i) for i, b in enumerate(ingested)), encoding="utf-8")
    daemon = Daemon(bench_config(root), embedder=embedder)
    try:
        summary = anyio.run(daemon.run_once)
    finally:
        daemon.close()
    print(f"ingested and embedded {summary.vectors} real tldr examples in {summary.elapsed_s:.1f} s")
    step = max(1, len(held_out) // 500)
    return [b.description for b in held_out[::step]][:500]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=TLDR_INPUT)
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR, help="the tldr pages (see below)")
    parser.add_argument("--real", type=positive, default=2000, help="real tldr examples embedded (default 2000)")
    parser.add_argument("--total", type=int, default=50_000, help="indexed vectors, padding included")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per contender")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.total)
        return

    require_tldr(args.tldr, parser.prog)
    import anyio

    from learnerd.cmd._client import AdminClient
    from learnerd.daemon.logging import configure_logging
    from learnerd.ml.embedders import MiniLMEmbedder
    from learnerd.store import db
    from learnerd.store.embeddings import load_index
    from learnerd.store.retrieval import describe_hits, nearest

    configure_logging("warning")
    root = Path(tempfile.mkdtemp(prefix="ld-bench-", dir="/tmp"))
    child = None
    try:
        embedder = MiniLMEmbedder()
        queries = prepare(root, args.tldr, args.real, embedder)

        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(root), "--total", str(args.total)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        conn = db.connect(root / "state" / "learnerd.db", readonly=True)
        index = load_index(conn, embedder.name, embedder.dim)
        padded = pad_index(index, args.total, embedder.dim)

        client = AdminClient(root / "state" / "learnerd.sock")
        deadline = time.monotonic() + 300
        while True:
            try:
                status = client.call("GET", "/status")
                if status["state"] == "running" and all(
                    c["queue_depth"] == 0 and not c["in_flight"] for c in status["controllers"].values()
                ):
                    break
            except Exception:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
        assert status["counts"]["indexed"] == args.total, status["counts"]

        def baseline(text: str) -> list[str]:
            return [h["id"] for h in describe_hits(conn, nearest(embedder, index, text, args.k), args.k)]

        async def measure() -> tuple[list[float], list[float], int]:
            import aiohttp

            connector = aiohttp.UnixConnector(path=str(root / "state" / "learnerd.sock"))
            daemon_s: list[float] = []
            base_s: list[float] = []
            agree = 0
            async with aiohttp.ClientSession(connector=connector) as session:

                async def via_daemon(text: str) -> list[str]:
                    async with session.post("http://learnerd/search", json={"text": text, "k": args.k}) as r:
                        return [h["id"] for h in await r.json()]

                for text in queries[:20]:  # warm-up, both paths
                    await via_daemon(text)
                    baseline(text)
                per_round = max(1, args.queries // args.rounds)
                for r in range(args.rounds):
                    batch = [queries[(r * per_round + i) % len(queries)] for i in range(per_round)]
                    for text in batch:
                        t = time.perf_counter()
                        got = await via_daemon(text)
                        daemon_s.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        want = baseline(text)
                        base_s.append(time.perf_counter() - t)
                        agree += got == want
            return daemon_s, base_s, agree

        daemon_s, base_s, agree = anyio.run(measure)
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=120)
        shutil.rmtree(root, ignore_errors=True)

    n = len(daemon_s)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    omp = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"machine: {os.cpu_count()} CPUs, load average {load}; OMP_NUM_THREADS={omp}")
    print(
        f"index: {args.total} vectors ({args.total - padded} real MiniLM embeddings of tldr examples, {padded} random "
        f"unit vectors added to reach {args.total}); k={args.k}; {n} queries per contender in {args.rounds} "
        "interleaved rounds"
    )
    print(f"{'':10} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, values in (("daemon", daemon_s), ("baseline", base_s)):
        ms = [v * 1000 for v in values]
        print(f"{name:10} {percentile(ms, 50):8.2f} {percentile(ms, 99):8.2f} {statistics.fmean(ms):8.2f}")
    print(
        f"ratio daemon/baseline: p50 {percentile(daemon_s, 50) / percentile(base_s, 50):.2f}x, "
        f"p99 {percentile(daemon_s, 99) / percentile(base_s, 99):.2f}x; "
        f"same top-{args.k} ids in {agree}/{n} queries"
    )


if __name__ == "__main__":
    main()
