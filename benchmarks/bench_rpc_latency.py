"""RPC latency of a running daemon: ``inject_probe`` round trips with the daemon idle and while a training
cycle runs, measured in the same run against the same ``learnerd run`` process.

The daemon runs as a subprocess with its default training settings (torch's default thread count,
niceness 10), except ``warm_spare = false`` (so that the idle phase is idle) and a debounce that keeps the
probes' own document from training during the measurement (``debounce_s = 1``, ``debounce_max_s = 600``:
the client pushes far more often than once a second), and room for every probe pushed. One client sends
``--rate`` probes per second over a keep-alive connection (paced, not back to back: a saturating client
would take the CPU a niced training process needs, and measure the client); every answer comes after an
fsync of the journal:

1. **idle**: the daemon has started (embedder loaded) and nothing trains;
2. **training**: a document with a long step budget is saved in the docs directory; measured from the
   moment the daemon logs that document's ``training.started`` until ``--seconds`` after the first
   training step — so the training process's start-up (imports, loading the model) is inside the window,
   and its steps too. The client pushes without a pause from the first phase to the last (the probes'
   own document stays debounced instead of training in a gap).

Prints p50 / p99 / max for both phases and the ratios training ÷ idle; the goal is p99 < 100 ms during
training. Usage::

    python benchmarks/bench_rpc_latency.py [--seconds 15] [--rate 50]

Input: none beyond learnerd itself (the built-in tiny model, learnerd/tiny-llama, made from no download).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import anyio

from learnerd.ml.tiny_model import ensure_tiny_model
from learnerd.store.dlm import Document, new_document
from tests.support.daemon_process import free_port

TOKEN = "bench-token"
LONG_BODY = "::instruction::\n" + "".join(f"### Q\nQuestion {i}?\n\n### A\nAnswer {i}\n\n" for i in range(64))
CONFIG = """
[training]
warm_spare = false
debounce_s = 1.0
debounce_max_s = 600.0

[rpc]
capacity = 10000000      # nothing drains the probes during the measurement
"""


def events(log: Path) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                out.append(record)
    return out


def wait_event(log: Path, predicate, proc: subprocess.Popen, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in events(log):
            if predicate(record):
                return record
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting in the daemon's log:\n{log.read_text()[-3000:]}")


async def measure(url: str, phase: Callable[[], str], rate: float) -> dict[str, list[float]]:
    """inject_probe round trips, ``rate`` per second (each starts on schedule, or at once when late), until
    ``phase()`` says ``"done"``; each latency (milliseconds) is filed under the phase it started in."""
    latencies: dict[str, list[float]] = defaultdict(list)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as session:
        i = 0
        next_at = time.perf_counter()
        while (now := phase()) != "done":
            await anyio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += 1.0 / rate
            payload = {"method": "inject_probe", "params": {"prompt": f"{now} question {i}?", "reference": "ok"}}
            started = time.perf_counter()
            async with session.post(url, json=payload, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise SystemExit(f"HTTP {r.status}: {await r.text()}")
            latencies[now].append((time.perf_counter() - started) * 1000)
            i += 1
    return latencies


class Phases:
    """The phase the measurement is in (the daemon's log is checked at most every 0.2 s).

    ``idle`` for ``seconds``; then the long document is written and it is ``starting`` until the daemon
    logs that document's ``training.started`` (told apart from the probes' own document by its adapter
    directory); ``training`` from then until ``seconds`` after that process's first step; then ``done``.
    The pushes never pause, so the probes' own document keeps being debounced and does not train.
    """

    def __init__(self, log: Path, long: Path, document: Document, seconds: float) -> None:
        self.log, self.long, self.document, self.seconds = log, long, document, seconds
        self.idle_until = time.monotonic() + seconds
        self.pid: int | None = None
        self.first_step: float | None = None
        self._checked = 0.0

    def __call__(self) -> str:
        now = time.monotonic()
        if now < self.idle_until:
            return "idle"
        if not self.long.exists():
            self.long.write_bytes(self.document.to_bytes() + LONG_BODY.encode())
        if now - self._checked > 0.2 and self.first_step is None:
            self._checked = now
            adapters = f"/adapters/{self.document.frontmatter.dlm_id}/"
            for e in events(self.log):
                if self.pid is None and e.get("event") == "training.started" and adapters in e["output_dir"]:
                    self.pid = e["pid"]
                elif self.pid is not None and e.get("event") == "training.progress" and e.get("pid") == self.pid:
                    self.first_step = now
                    break
        if self.pid is None:
            return "starting"
        return "training" if self.first_step is None or now - self.first_step <= self.seconds else "done"


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


INPUT = "Input: none beyond learnerd itself (the built-in tiny model, learnerd/tiny-llama, made from no download)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INPUT)
    parser.add_argument("--seconds", type=float, default=15.0, help="idle phase; training steps measured as long")
    parser.add_argument("--rate", type=float, default=50.0, help="probes pushed per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rpc-") as tmp:
        root = Path(tmp)
        state, docs = root / "state", root / "docs"
        docs.mkdir(parents=True)
        ensure_tiny_model(state / "models")  # built once per state dir; not part of what is measured
        (root / "learnerd.toml").write_text(CONFIG)
        port = free_port()
        log = root / "daemon.log"
        env = {**os.environ, "LEARNERD_PROBE_TOKEN": TOKEN, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        argv = [sys.executable, "-m", "learnerd", "run", "--config", str(root / "learnerd.toml"),
                "--state-dir", str(state), "--docs-dir", str(docs), "--listen-rpc", f"127.0.0.1:{port}"]  # fmt: skip
        with log.open("wb") as stderr:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_event(log, lambda e: e.get("event") == "rpc listening", proc)
            wait_event(log, lambda e: e.get("event") == "controller started" and e.get("controller") == "embeddings",
                       proc)  # fmt: skip
            time.sleep(2.0)
            document = new_document("learnerd/tiny-llama", training={"learning_rate": 1e-3, "max_steps": 10**6})
            phases = Phases(log, docs / "long.dlm", document, args.seconds)
            latencies = anyio.run(measure, f"http://127.0.0.1:{port}/rpc", phases, args.rate)
            idle, training = latencies["idle"], latencies["training"]
            ours = [e for e in events(log) if e.get("pid") == phases.pid]
            steps = [e["step"] for e in ours if e.get("event") == "training.progress"]
            finished = any(e.get("event") == "training.finished" for e in ours)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    if finished:
        raise SystemExit("the training cycle ended inside the window; raise its max_steps")

    print(f"{os.cpu_count()} CPU(s); idle {args.seconds:.0f} s; training: start-up + {args.seconds:.0f} s of steps; "
          f"one client, {args.rate:g} requests/s")  # fmt: skip
    print(f"training steps during the training phase: {max(steps) if steps else 0}")
    print(f"{'':<28}{'requests':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for label, values in (("daemon idle", idle), ("training cycle running", training)):
        p50, p99 = statistics.median(values), pct(values, 0.99)
        print(f"{label:<28}{len(values):>9}{p50:>9.2f}{p99:>9.2f}{max(values):>9.2f}")
    print(f"ratio training / idle:      p50 {statistics.median(training) / statistics.median(idle):.2f}   "
          f"p99 {pct(training, 0.99) / pct(idle, 0.99):.2f}")  # fmt: skip
    verdict = "meets" if pct(training, 0.99) < 100 else "MISSES"
    print(f"p99 during training {pct(training, 0.99):.1f} ms: {verdict} the 100 ms goal")


if __name__ == "__main__":
    main()
