"""Fleet throughput: examples/s through ``learnerd run`` replicas on PostgreSQL, against one on SQLite.

Each configuration starts its replicas (``learnerd run --no-train``, one process each, each tailing
its own empty log directory) and waits until every one is ready (embedder loaded, ``READY=1``), so
start-up is not timed. Then the tldr blocks (``benchmarks/tldr_to_blocklog.py``) are written into the
log directories, split evenly, and the clock runs until every block has its example and its vector
committed. Reported: examples/s for 1 replica on SQLite (the baseline), 1 replica on PostgreSQL (the
ratio PostgreSQL / SQLite; target >= 0.7), and 2 and 3 replicas on PostgreSQL (printed: on a machine
with fewer cores than replicas they compete for the CPU, so the figures show the coordination
overhead, not the scaling; docs/fleet.md has the estimate for N hosts).

PostgreSQL: a throw-away server started from the local binaries (as the tests start theirs), with
``synchronous_commit = off``: the durability of SQLite's WAL with ``synchronous = NORMAL``, which
learnerd uses (a commit survives a process crash; a power loss may roll back the newest commits,
whole); a fresh database per configuration. Exits 2 when the tldr pages or the PostgreSQL binaries
are missing.

Run: ``python benchmarks/bench_fleet.py [--blocks 1000] [--replicas 3]``
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import convert
from learnerd.store import db
from tests.support.daemon_process import DaemonProcess, wait_until

PEER_TLDR = Path(__file__).resolve().parents[2] / "shared" / "peer-data" / "tldr"

CONFIG = """\
state_dir = "state"
log_dirs = ["logs"]
docs_dirs = ["{docs}"]

[analyzer]
poll_interval_s = 0.2

[shutdown]
drain_timeout_s = 300.0

[training]
enabled = false
{store}
"""


INPUT = (
    "Input: the tldr pages (../shared/peer-data/tldr, or --tldr DIR) and PostgreSQL's server binaries; absent, exits 2."
)


def count_done(target: str | Path) -> int:
    """Blocks whose example and vector are both committed."""
    conn = db.connect(target, readonly=not db.is_postgres(target))
    try:
        return conn.execute("SELECT count(*) FROM examples e JOIN embeddings v ON v.example_id = e.id").fetchone()[0]
    finally:
        conn.close()


def measure(root: Path, lines: list[Path], total: int, replicas: int, store_url: str | None) -> float:
    """Examples/s through ``replicas`` replicas (``store_url`` None: one on SQLite)."""
    store = f'\n[store]\nurl = "{store_url}"\n' if store_url else ""
    roots = [root / f"r{i}" for i in range(replicas)]
    for r in roots:
        (r / "logs").mkdir(parents=True)
        (r / "learnerd.toml").write_text(CONFIG.format(docs=root / "docs", store=store))
    target = store_url or roots[0] / "state" / "learnerd.db"
    processes = [DaemonProcess(r, "--log-level", "warning", name="replica") for r in roots]
    try:
        for p in processes:
            p.wait_ready()
        start = time.perf_counter()
        for i, log in enumerate(lines):
            shutil.copy(log, roots[i % replicas] / "logs" / log.name)
        wait_until(lambda: count_done(target) >= total, timeout=3600, what="every example", interval=0.05)
        elapsed = time.perf_counter() - start
    finally:
        for p in processes:
            p.stop()
    return total / elapsed


#: Durability equal to SQLite's WAL with synchronous=NORMAL (learnerd.store.db): a commit survives a
#: process crash; after a power loss the newest commits may roll back, whole.
PG_SETTINGS = {"synchronous_commit": "off"}


class _TimedQueue:
    """A workqueue stand-in that records when each key arrived (perf_counter seconds)."""

    name = "examples"

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}

    def add(self, key: str) -> None:
        self.arrived.setdefault(key, time.perf_counter())


def notify_latency(url: str, messages: int = 200) -> list[float]:
    """Seconds from a key's add on replica A (which does not own it) to its arrival on its owner B's
    queue: the routing, one NOTIFY (flushed at once) and the delivery, through two real :class:`Fleet`
    objects on ``url``."""
    import anyio

    from learnerd.fleet.fleet import Fleet

    async def run() -> list[float]:
        conns = [db.connect(url) for _ in range(2)]
        fleets = [Fleet(url, c, state_dir=f"/bench/{i}", heartbeat_s=0.2) for i, c in enumerate(conns)]
        queues = [_TimedQueue(), _TimedQueue()]
        routed = [f.route(q) for f, q in zip(fleets, queues, strict=True)]
        latencies = []
        try:
            async with anyio.create_task_group() as tg:
                for fleet in fleets:
                    await tg.start(fleet.run, lambda: None)
                while any(len(f.owners()["pipeline"]) < 2 for f in fleets):
                    await anyio.sleep(0.05)
                keys = [k for k in (f"key-{i}" for i in range(10 * messages)) if fleets[1].owns("examples", k)]
                for key in keys[:messages]:
                    sent = time.perf_counter()
                    routed[0].add(key)
                    fleets[0].flush()
                    while key not in queues[1].arrived:
                        await anyio.sleep(0.0005)
                    latencies.append(queues[1].arrived[key] - sent)
                tg.cancel_scope.cancel()
        finally:
            for fleet, conn in zip(fleets, conns, strict=True):
                fleet.close()
                conn.close()
        return latencies

    return anyio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3, help="the largest fleet measured (1..N)")
    parser.add_argument("--files", type=int, default=12, help="log files the blocks are split into")
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR)
    args = parser.parse_args()
    if not args.tldr.is_dir():
        print(f"tldr pages not found at {args.tldr} (--tldr)", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-", dir="/tmp") as tmp:
        source = Path(tmp) / "source"
        n = convert(args.tldr, source, limit=args.blocks)
        lines = [line for log in sorted(source.glob("*.jsonl")) for line in log.read_text().splitlines(True)]
        split = Path(tmp) / "split"
        split.mkdir()
        files = []
        for i in range(args.files):  # contiguous parts: a block's lines stay together (but at the cuts)
            part = split / f"part{i:02d}.jsonl"
            part.write_text("".join(lines[i * len(lines) // args.files : (i + 1) * len(lines) // args.files]))
            files.append(part)
        print(f"blocks: {n}   log files: {args.files}   PostgreSQL settings: {PG_SETTINGS}")
        sqlite = measure(Path(tmp) / "sqlite", files, n, 1, None)
        print(f"1 replica,  SQLite     : {sqlite:8.1f} examples/s  (baseline)")
        from tests.support.postgres import find_bindir, postgres_server

        if find_bindir() is None:
            print("no PostgreSQL server binaries (initdb, pg_ctl) found", file=sys.stderr)
            sys.exit(2)
        with postgres_server(PG_SETTINGS) as server:
            url = server.create_database()
            db.migrate(url)
            lat = sorted(notify_latency(url))
            p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
            print(f"key routed to its owner over NOTIFY: p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms (budget 1 s)")
            for replicas in range(1, args.replicas + 1):
                url = server.create_database()
                db.migrate(url)
                rate = measure(Path(tmp) / f"pg{replicas}", files, n, replicas, url)
                extra = f"  ratio to SQLite {rate / sqlite:5.2f} (target >= 0.7)" if replicas == 1 else ""
                print(f"{replicas} replica{'s' if replicas > 1 else ' '}, PostgreSQL : {rate:8.1f} examples/s{extra}")


if __name__ == "__main__":
    main()
