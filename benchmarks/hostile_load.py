"""Issue 14's "must show": a real ``learnerd run`` under the mixed hostile load of cases 1, 2, 5, 6 and 13
at once, for ``--seconds``, on 127.0.0.1 only; every loop is bounded by the run's deadline.

The daemon runs as a subprocess (RPC and search served over TCP, the admin socket, JSON logs to a file,
training debounced past the run so the journal is what it acknowledged). Clients, all at once:

* **honest**: ``--pushers`` RPC clients pushing distinct probes back to back (a dropped connection is
  counted and the probe pushed again);
* **case 1**: a log writer appending a good block and a hostile line (``exit_code`` = 2**64, JSON nested
  2,000 levels, a lone ``\\ud800``) every 0.2 s, starting a new log file every 10 s;
* **case 2**: clients pushing probes whose prompt holds a lone surrogate;
* **case 5**: requests whose ``Authorization`` holds bytes that are not UTF-8 (RPC and search);
* **case 6**: bodies nested 1,000 and 20,000 levels, a 5,000-digit ``k``, a lone surrogate in the search
  text (RPC and search);
* **case 13**: ``--slow`` clients sending their headers one byte a second, ``--idle`` connections opened
  and never used, and bursts of ``--searches`` concurrent searches every second.

Then it prints: whether the daemon stayed up (and exited 0 on SIGTERM), the responses by status (5xx must
be 0), the search answers' latency, honest pushes acknowledged and how many of them are in the journal,
good log blocks written and ingested, how long the server let slow and idle clients hold a connection
(the longest), the daemon's most open file descriptors, and tracebacks in its log. Case 1 is fixed in the
analyzer (not in the HTTP layer): where that fix is absent, the good blocks after a hostile line are
reported missing.

Usage::

    python benchmarks/hostile_load.py [--seconds 60] [--pushers 20] [--slow 1000] [--idle 3000] [--searches 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import anyio

from learnerd.analyzer.blocklog import event_line
from learnerd.store import db
from learnerd.store.blocks import Cell, list_block_ids
from learnerd.store.probe_journal import ProbeJournal
from tests.support.daemon_process import free_port
from tests.support.hostile import NON_UTF8_TOKEN, connect, nested, raw_request, read_all, request_bytes, with_raw

RPC_TOKEN = "bench-probe-token-0123456789abcdef"
SEARCH_TOKEN = "bench-search-token-0123456789abcdef"
CONFIG = """
[logging]
format = "json"

[training]
warm_spare = false
debounce_s = 3600.0          # no cycle during the run: the journal holds every acknowledged probe
debounce_max_s = 3600.0

[rpc]
capacity = 10000000
"""


INPUT = "Input: none (it starts its own daemon on 127.0.0.1 and writes its own logs)."


class Load:
    """Counters shared by the clients."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.acknowledged: set[str] = set()
        self.dropped = 0
        self.good_blocks: list[str] = []
        self.held_s: dict[str, float] = {"slow": 0.0, "idle": 0.0}
        self.closed = Counter()
        self.max_fds = 0
        self.search_s: list[float] = []

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def note(self, kind: str, status: int) -> None:
        self.statuses[kind, status] += 1


async def honest_pusher(load: Load, url: str, n: int) -> None:
    headers = {"Authorization": f"Bearer {RPC_TOKEN}"}
    i = 0
    async with aiohttp.ClientSession() as session:
        while load.running():
            prompt = f"Honest client {n} question {i}?"
            payload = {"method": "inject_probe", "params": {"prompt": prompt, "reference": f"answer {n}-{i}"}}
            try:
                async with session.post(url, json=payload, headers=headers) as r:
                    await r.read()
                    load.note("honest push", r.status)
                    if r.status == 200:
                        load.acknowledged.add(prompt)
                        i += 1
            except aiohttp.ClientError:
                load.dropped += 1  # pushed again under the same prompt


async def hostile_requests(load: Load, rpc: tuple[str, int], search: tuple[str, int]) -> None:
    rpc_auth = {"Authorization": f"Bearer {RPC_TOKEN}".encode()}
    search_auth = {"Authorization": f"Bearer {SEARCH_TOKEN}".encode()}
    probe = {"method": "inject_probe", "params": {"prompt": "PLACEHOLDER", "reference": "r"}}
    cases = [
        (
            "case 2 surrogate probe",
            rpc,
            "/rpc",
            json.dumps(probe).replace("PLACEHOLDER", "\\ud800 q?").encode(),
            rpc_auth,
        ),
        ("case 5 non-UTF-8 token", rpc, "/rpc", json.dumps(probe).encode(), {"Authorization": NON_UTF8_TOKEN}),
        ("case 5 non-UTF-8 token", search, "/search", b'{"text": "ls"}', {"Authorization": NON_UTF8_TOKEN}),
        ("case 6 nested body", rpc, "/rpc", nested(1_000), rpc_auth),
        ("case 6 nested body", search, "/search", b'{"text": "x", "k": ' + nested(20_000) + b"}", search_auth),
        ("case 6 5,000-digit k", search, "/search", with_raw({"text": "x"}, "k", "9" * 5000), search_auth),
        ("case 6 surrogate text", search, "/search", with_raw({"k": 1}, "text", '"\\ud800"'), search_auth),
    ]
    while load.running():
        for kind, where, path, body, headers in cases:
            try:
                status, _ = await raw_request(where, request_bytes("POST", path, body, headers))
            except OSError:
                status = 0  # connection refused or reset (the cap at work): no answer
            load.note(kind, status)


async def searches(load: Load, url: str, burst: int) -> None:
    headers = {"Authorization": f"Bearer {SEARCH_TOKEN}"}

    async def one(session: aiohttp.ClientSession) -> None:
        started = time.monotonic()
        try:
            async with session.post(url, json={"text": "list the files in a directory"}, headers=headers) as r:
                await r.read()
                load.note("case 13 search burst", r.status)
                load.search_s.append(time.monotonic() - started)
        except aiohttp.ClientError:
            load.note("case 13 search burst", 0)

    connector = aiohttp.TCPConnector(limit=burst)
    async with aiohttp.ClientSession(connector=connector) as session:
        while load.running():
            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(burst):
                    tg.start_soon(one, session)
            await anyio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


async def held_connection(load: Load, kind: str, where: tuple[str, int], slow: bool) -> None:
    """A connection that never completes a request; records how long the server let it stay."""
    try:
        stream = await connect(where)
    except OSError:
        load.closed[kind + " refused"] += 1
        return
    opened = time.monotonic()
    async with stream, anyio.create_task_group() as tg:

        async def drip() -> None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                for byte in b"POST /rpc HTTP/1.1\r\nHost: learnerd\r\nX-Slow: " + b"a" * 1000:
                    await stream.send(bytes([byte]))
                    await anyio.sleep(1.0)

        if slow:
            tg.start_soon(drip)
        with anyio.move_on_after(max(0.0, load.deadline - time.monotonic())):
            await read_all(stream)
            load.closed[kind] += 1
        load.held_s[kind] = max(load.held_s[kind], time.monotonic() - opened)
        tg.cancel_scope.cancel()


async def log_writer(load: Load, logs: Path) -> None:
    """Good blocks and hostile lines (case 1), a new file every 10 s."""
    hostile = [
        event_line("executed", "hostile-exit", 1.0, cell=Cell("code", "x", "bash"), exit_code=0).replace(
            '"exit_code":0', f'"exit_code":{2**64}'
        ),
        '{"v": ' + "[" * 2000 + "]" * 2000 + "}\n",
        '{"learnerd":1,"type":"context","block_id":"\\ud800","time":1.0,"cells":[]}\n',
    ]
    n = 0
    started = time.monotonic()
    while load.running():
        path = logs / f"session-{int((time.monotonic() - started) // 10):03d}.jsonl"
        block = f"good-{n:05d}"
        description = f"Show the good block number {n}"
        good = event_line("context", block, 1_700_000_000.0 + n, cells=[Cell("markup", description)])
        good += event_line("executed", block, 1_700_000_001.0 + n, cell=Cell("code", f"echo {n}", "bash"), exit_code=0)
        with path.open("a", encoding="utf-8") as f:
            f.write(good + hostile[n % len(hostile)])
        load.good_blocks.append(block)
        n += 1
        await anyio.sleep(0.2)


async def watch_fds(load: Load, pid: int) -> None:
    while load.running():
        with contextlib.suppress(OSError):
            load.max_fds = max(load.max_fds, len(os.listdir(f"/proc/{pid}/fd")))
        await anyio.sleep(0.5)


async def run_load(args: argparse.Namespace, load: Load, rpc: tuple[str, int], search: tuple[str, int], pid: int,
                   logs: Path) -> None:  # fmt: skip
    rpc_url = f"http://{rpc[0]}:{rpc[1]}/rpc"
    search_url = f"http://{search[0]}:{search[1]}/search"
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_fds, load, pid)
        tg.start_soon(log_writer, load, logs)
        for n in range(args.pushers):
            tg.start_soon(honest_pusher, load, rpc_url, n)
        for _ in range(4):
            tg.start_soon(hostile_requests, load, rpc, search)
        tg.start_soon(searches, load, search_url, args.searches)
        for i in range(args.slow):
            tg.start_soon(held_connection, load, "slow", rpc if i % 2 else search, True)
        for i in range(args.idle):
            tg.start_soon(held_connection, load, "idle", rpc if i % 2 else search, False)
            if i % 100 == 99:
                await anyio.sleep(0)  # let the others run while thousands connect


def wait_ready(log: Path, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited at start:\n{log.read_text()[-3000:]}")
        if '"learnerd ready"' in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise SystemExit("the daemon did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INPUT)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pushers", type=int, default=20, help="honest RPC clients")
    parser.add_argument("--slow", type=int, default=1000, help="clients sending headers one byte a second")
    parser.add_argument("--idle", type=int, default=3000, help="connections opened and never used")
    parser.add_argument("--searches", type=int, default=200, help="concurrent searches per burst (one a second)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        root = Path(tmp)
        state, logs, docs = root / "state", root / "logs", root / "docs"
        logs.mkdir()
        (root / "learnerd.toml").write_text(CONFIG)
        rpc, search = ("127.0.0.1", free_port()), ("127.0.0.1", free_port())
        env = dict(os.environ, LEARNERD_PROBE_TOKEN=RPC_TOKEN, LEARNERD_SEARCH_TOKEN=SEARCH_TOKEN,
                   PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_HUB_OFFLINE="1")  # fmt: skip
        command = [sys.executable, "-m", "learnerd", "run", "--config", str(root / "learnerd.toml"),
                   "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(docs),
                   "--listen-rpc", f"{rpc[0]}:{rpc[1]}", "--listen-search", f"{search[0]}:{search[1]}"]  # fmt: skip
        daemon_log = root / "daemon.log"
        with daemon_log.open("w") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_ready(daemon_log, proc)
            load = Load(args.seconds)
            anyio.run(run_load, args, load, rpc, search, proc.pid, logs)
            time.sleep(3.0)  # the analyzer's last pass over the last lines
            stayed_up = proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        journaled = {p.prompt for p in ProbeJournal(state / "journals" / "injected-probes.jsonl").pending()}
        conn = db.connect(state / "learnerd.db", readonly=True)
        ingested = set(list_block_ids(conn)) & set(load.good_blocks)
        conn.close()
        tracebacks = Counter()
        for line in daemon_log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and "exception" in record:
                    tracebacks[f"{record.get('logger', '?')}: {record.get('event')}"] += 1

    fivexx = sum(n for (_, status), n in load.statuses.items() if status >= 500)
    print(f"hostile load for {args.seconds:g} s: {args.pushers} honest pushers, {args.slow} slow clients, "
          f"{args.idle} idle connections, bursts of {args.searches} searches, case 1/2/5/6 bodies")  # fmt: skip
    print(f"daemon stayed up: {stayed_up}; exit code after SIGTERM: {exit_code}")
    for (kind, status), n in sorted(load.statuses.items()):
        print(f"  {kind:24s} HTTP {status if status else 'none':>4}: {n}")
    print(f"responses 5xx: {fivexx}")
    missing = load.acknowledged - journaled
    print(f"honest pushes acknowledged: {len(load.acknowledged)}; journaled: {len(load.acknowledged) - len(missing)}; "
          f"missing: {len(missing)}; dropped connections (pushed again): {load.dropped}")  # fmt: skip
    print(
        f"good log blocks written: {len(load.good_blocks)}; ingested: {len(ingested)}"
        + ("" if len(ingested) == len(load.good_blocks) else "  <- case 1 (analyzer) not fixed on this build")
    )
    if load.search_s:
        ordered = sorted(load.search_s)
        p50, p99 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(f"search answers (200 or 429): p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {ordered[-1]:.2f} s")
    print(f"longest hold: slow client {load.held_s['slow']:.1f} s, idle connection {load.held_s['idle']:.1f} s; "
          f"closed by the server: {dict(load.closed)}")  # fmt: skip
    print(f"daemon's open file descriptors at most: {load.max_fds}; tracebacks in its log: {sum(tracebacks.values())}")
    for where, n in tracebacks.most_common(5):
        print(f"  {n:6d} x {where}")
    ok = stayed_up and exit_code == 0 and fivexx == 0 and not missing
    return 0 if ok and len(ingested) == len(load.good_blocks) else 1


if __name__ == "__main__":
    sys.exit(main())
