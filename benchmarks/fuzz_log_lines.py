"""Fuzz the log-line path (parse, validate, merge under a savepoint) with hypothesis at scale.

Each hypothesis example is a list of 1 to 8 hostile lines (``tests/support/hostile_lines.py``:
arbitrary bytes, arbitrary JSON values with big integers, lone surrogate escapes and deep nesting,
objects shaped like block-log events, foyle lines, Claude Code and Codex lines and OTLP/JSON exports with
arbitrary fields), written between good lines into a new file of a real log directory and ingested by one
real :class:`Analyzer` on one real SQLite database; the file is deleted after its check, so every sync
stays O(1). Then ``--row-examples`` lists of hostile atuin ``history.db`` rows (any SQLite value in any
column) between good rows, each list in a new database (``check_history``). Checked per
file: no error, every good line ingested, every hostile line that is not a JSON object counted as
malformed and named with its line, no line counted twice (``check_file``).

The budget is fixed: ``--examples`` hypothesis examples (default 2,000, about 9,000 lines); it
prints the number of hostile lines tried, the failures (a failure raises, with hypothesis' shrunk
example) and the rate. ``--seed`` makes a run repeatable.

Run: ``python benchmarks/fuzz_log_lines.py [--examples 2000] [--row-examples 200] [--seed 0]``

Input: none beyond a checkout with the test extra (hypothesis, tests/support/hostile_lines.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learnerd.analyzer.analyzer import Analyzer
from learnerd.daemon.logging import configure_logging
from learnerd.store.db import connect
from tests.support.hostile_lines import atuin_rows, check_file, check_history, hostile_lines

INPUT = "Input: none beyond a checkout with the test extra (hypothesis, tests/support/hostile_lines.py)."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--examples", type=int, default=2000, help="hypothesis examples (files) to try")
    parser.add_argument("--row-examples", type=int, default=200, help="hypothesis examples (atuin databases)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    configure_logging("error")  # one warning per hostile line would drown the figure
    tried = {"lines": 0, "files": 0, "rows": 0, "databases": 0}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        conn = connect(Path(tmp) / "state" / "learnerd.db")
        analyzer = Analyzer(conn, [logs], lambda _block_id: None)

        @seed(args.seed)
        @settings(
            max_examples=args.examples,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(bad=st.lists(hostile_lines, min_size=1, max_size=8))
        def fuzz(bad: list[bytes]) -> None:
            n = tried["files"]
            path = logs / f"f{n}.jsonl"
            try:
                anyio.run(check_file, analyzer, conn, path, bad, 100 * n)
            finally:
                path.unlink(missing_ok=True)
            tried["files"] += 1
            tried["lines"] += len(bad)

        @seed(args.seed)
        @settings(
            max_examples=args.row_examples,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(bad=st.lists(atuin_rows, min_size=1, max_size=8))
        def fuzz_rows(bad: list[dict]) -> None:
            n = tried["databases"]
            path = logs / f"h{n}.db"
            try:
                anyio.run(check_history, analyzer, conn, path, bad, 100 * n)
            finally:
                path.unlink(missing_ok=True)
            tried["databases"] += 1
            tried["rows"] += len(bad)

        start = time.perf_counter()
        fuzz()
        fuzz_rows()
        elapsed = time.perf_counter() - start
        analyzer.close()
        conn.close()
    stats = analyzer.stats
    print(
        f"fuzz_log_lines: {tried['lines']:,} hostile lines in {tried['files']:,} files and {tried['rows']:,} hostile "
        f"atuin rows in {tried['databases']:,} databases tried, 0 failures, "
        f"{elapsed:.1f} s ({(tried['lines'] + tried['rows']) / elapsed:,.0f} records/s); "
        f"malformed {stats.malformed_lines:,}, "
        f"foreign {stats.foreign_lines:,}, unknown {stats.unknown_events:,}, errors {stats.errors}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
