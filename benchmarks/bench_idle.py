"""Idle cost of the analyzer: CPU seconds used while ``--files`` tracked log files do not change.

``--files`` log files (default 10,000, one block-log line each) are spread over ``--dirs``
directories of one log directory and ingested once. Then each contender runs ``Analyzer.run`` on
the same database for ``--window`` seconds (default 30) while nothing is written, and the process
CPU time it used is measured (``time.process_time``: every thread, watchfiles' included):

- **baseline**: a full rescan every ``poll_interval_s`` (1 s) — what the analyzer did while idle
  before issue 14 (case 15), with or without the watcher; run here as ``force_polling = true``.
- **watched**: the default configuration: watchfiles events, a cheap log-directory check every
  ``poll_interval_s`` and a full rescan every ``rescan_interval_s`` (300 s).

Prints both in CPU seconds per minute and as % of one core, and their ratio (baseline / watched).
The contenders run ``--repeats`` times, interleaved; the lowest figure of each counts.

Run: ``python benchmarks/bench_idle.py [--files 10000] [--window 30]`` (about 2 × repeats × window s).

Input: none (it writes its own log files).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.daemon.logging import configure_logging
from learnerd.store.blocks import Cell
from learnerd.store.db import connect


def make_logs(logs: Path, files: int, dirs: int) -> None:
    for i in range(files):
        d = logs / f"d{i % dirs:04}"
        d.mkdir(exist_ok=True)
        line = event_line("executed", f"b{i}", 1.0, cell=Cell("code", f"echo {i}", "bash"), exit_code=0)
        (d / f"f{i:06}.jsonl").write_text(line)


async def idle_cpu(conn, logs: Path, config: AnalyzerConfig, window: float) -> tuple[float, int]:
    """CPU seconds used by ``Analyzer.run`` during ``window`` idle seconds, and the rescans it made."""
    analyzer = Analyzer(conn, [logs], lambda _block_id: None, config)
    async with anyio.create_task_group() as tg:
        await tg.start(analyzer.run)
        await anyio.sleep(min(2.0, config.poll_interval_s * 2))  # past the start-up scans
        rescans, cpu = analyzer.stats.rescans, time.process_time()
        await anyio.sleep(window)
        cpu, rescans = time.process_time() - cpu, analyzer.stats.rescans - rescans
        tg.cancel_scope.cancel()
    return cpu, rescans


INPUT = "Input: none (it writes its own log files)."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--window", type=float, default=30.0, help="idle seconds measured per run")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    configure_logging("warning")

    contenders = {
        "baseline (full rescan every 1 s)": AnalyzerConfig(force_polling=True),
        "watched (events; full rescan every 300 s)": AnalyzerConfig(),
    }
    best: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        make_logs(logs, args.files, args.dirs)
        conn = connect(Path(tmp) / "state" / "learnerd.db")
        with Analyzer(conn, [logs], lambda _block_id: None) as first:
            stats = anyio.run(first.sync)
        assert stats.files_tracked == args.files, stats
        for _ in range(args.repeats):
            for name, config in contenders.items():
                cpu, rescans = anyio.run(idle_cpu, conn, logs, config, args.window)
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, rescans)
        conn.close()

    print(f"idle analyzer, {args.files:,} tracked log files in {args.dirs} directories, {args.window:g} s windows:")
    for name, (cpu, rescans) in best.items():
        per_min = cpu * 60 / args.window
        print(f"  {name:44} {per_min:7.3f} CPU s/min ({100 * cpu / args.window:5.2f}% of a core), {rescans} rescans")
    (base, _), (watched, _) = best.values()
    print(f"  ratio baseline / watched: {base / max(watched, 1e-9):.1f}x less idle CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
