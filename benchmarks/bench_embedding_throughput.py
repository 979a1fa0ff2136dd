"""Embedding throughput through the running daemon vs the embedder called directly.

The daemon's figure is end to end: ``Daemon.run_once()`` over tldr block logs (ingestion, the
examples, embeddings and probes controllers, SQLite writes, the VectorIndex) with a fresh state
directory, examples embedded divided by the wall time. The baseline, measured in the same run with
the same loaded model, is ``MiniLMEmbedder.embed`` on the very same texts in batches of 64 and
nothing else. Target: ratio >= 0.9. Runs alternate (direct, daemon, direct, …); each side's best
run counts, since the machine may be shared.

Run: ``python benchmarks/bench_embedding_throughput.py [--blocks 2000] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import PEER_TLDR, TLDR_INPUT, convert, positive, require_tldr
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.daemon.logging import configure_logging
from learnerd.ml.embedders import MiniLMEmbedder
from learnerd.store.examples import list_examples


def through_daemon(logs: Path, embedder: MiniLMEmbedder) -> tuple[float, list[str]]:
    """Examples embedded per second by a fresh daemon over ``logs``, and the texts it embedded."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(state_dir=Path(tmp) / "state", log_dirs=[logs], docs_dirs=[Path(tmp) / "docs"])
        cfg.training.enabled = False  # embeddings only: training has its own benchmarks
        daemon = Daemon(cfg, embedder=embedder)
        try:
            start = time.perf_counter()
            summary = anyio.run(daemon.run_once)
            elapsed = time.perf_counter() - start
            texts = [e.query for e in list_examples(daemon.conn)]
        finally:
            daemon.close()
    assert summary.vectors == len(texts), "every example must have its vector"
    return len(texts) / elapsed, texts


def direct(embedder: MiniLMEmbedder, texts: list[str]) -> float:
    """Texts per second of ``embedder.embed`` over ``texts`` in batches of 64."""
    start = time.perf_counter()
    for i in range(0, len(texts), 64):
        embedder.embed(texts[i : i + 64])
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=TLDR_INPUT)
    parser.add_argument("--blocks", type=positive, default=2000, help="tldr blocks to learn (whole pages)")
    parser.add_argument("--repeats", type=positive, default=2)
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR, help="the tldr pages (see below)")
    args = parser.parse_args()
    require_tldr(args.tldr, parser.prog)
    configure_logging("warning")
    embedder = MiniLMEmbedder(batch_size=64)
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        n = convert(args.tldr, logs, limit=args.blocks)
        daemon_rates, direct_rates = [], []
        texts: list[str] = []
        for _ in range(args.repeats):
            if texts:
                direct_rates.append(direct(embedder, texts))
            rate, texts = through_daemon(logs, embedder)
            daemon_rates.append(rate)
            direct_rates.append(direct(embedder, texts))
    best_daemon, best_direct = max(daemon_rates), max(direct_rates)
    print(f"blocks: {n}, examples embedded per run: {len(texts)}")

    def listed(rates: list[float]) -> str:
        return ", ".join(f"{r:.1f}" for r in rates)

    print(f"direct embedder, batch 64 : {best_direct:8.1f} examples/s  (runs: {listed(direct_rates)})")
    print(f"through the daemon         : {best_daemon:8.1f} examples/s  (runs: {listed(daemon_rates)})")
    print(f"ratio daemon / direct      : {best_daemon / best_direct:8.2f}  (target >= 0.9)")


if __name__ == "__main__":
    main()
