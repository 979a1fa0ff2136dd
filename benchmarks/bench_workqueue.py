"""Workqueue throughput: add → get → done cycles per second, against a bare ``asyncio.Queue``.

Every contender carries the same traffic on the same harness (anyio on asyncio): ``--keys``
distinct keys per round, added by ``--producers`` tasks in chunks of 16 with a checkpoint between
chunks, taken by ``--consumers`` tasks that mark each key done at once; the next round starts
when every key of the round is done, so the workqueue never collapses an add and both queues
process exactly ``keys × rounds`` items. The ``asyncio.Queue`` does put_nowait / get / task_done.
Each contender runs ``--repeats`` times, interleaved; the best run counts (the machine is shared).

Run: ``python benchmarks/bench_workqueue.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.lowlevel
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learnerd.runtime.workqueue import PrometheusMetricsProvider, RateLimitingQueue, WorkQueue

CHUNK = 16


@dataclass
class Ops:
    """One queue seen through the three operations of a cycle, plus how to stop its consumers."""

    add: Callable[[str], None]
    get: Callable[[], Awaitable[str | None]]  # None: stop
    done: Callable[[str], None]
    stop: Callable[[int], None]  # called with the number of consumers


def asyncio_queue_ops() -> Ops:
    q: asyncio.Queue[str | None] = asyncio.Queue()

    def stop(consumers: int) -> None:
        for _ in range(consumers):
            q.put_nowait(None)

    return Ops(add=q.put_nowait, get=q.get, done=lambda _key: q.task_done(), stop=stop)


def workqueue_ops(q: WorkQueue[str]) -> Ops:
    async def get() -> str | None:
        key, _ = await q.get()
        return key

    return Ops(add=q.add, get=get, done=q.done, stop=lambda _consumers: q.shutdown())


async def run_traffic(ops: Ops, keys: list[str], rounds: int, producers: int, consumers: int) -> float:
    """Carry the traffic through ``ops``; return the elapsed seconds."""
    processed = 0
    target = 0
    round_done = anyio.Event()

    async def consumer() -> None:
        nonlocal processed, round_done
        while (key := await ops.get()) is not None:
            ops.done(key)
            processed += 1
            if processed == target:
                round_done.set()

    async def producer(mine: list[str]) -> None:
        for start in range(0, len(mine), CHUNK):
            for key in mine[start : start + CHUNK]:
                ops.add(key)
            await anyio.lowlevel.checkpoint()

    slices = [keys[i::producers] for i in range(producers)]
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(consumers):
            tg.start_soon(consumer)
        for _ in range(rounds):
            target += len(keys)
            round_done = anyio.Event()
            async with anyio.create_task_group() as feeding:
                for mine in slices:
                    feeding.start_soon(producer, mine)
            await round_done.wait()
        elapsed = time.perf_counter() - started
        ops.stop(consumers)
    assert processed == len(keys) * rounds, (processed, len(keys) * rounds)
    return elapsed


def contenders() -> dict[str, Callable[[], Ops]]:
    def daemon_queue() -> Ops:
        registry = CollectorRegistry()
        return workqueue_ops(RateLimitingQueue("bench", metrics=PrometheusMetricsProvider(registry)))

    return {
        "asyncio.Queue (baseline)": asyncio_queue_ops,
        "WorkQueue": lambda: workqueue_ops(WorkQueue()),
        "RateLimitingQueue + Prometheus metrics": daemon_queue,
    }


async def main(args: argparse.Namespace) -> None:
    keys = [f"block-{i:06d}" for i in range(args.keys)]
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, make in contenders().items():
            elapsed = await run_traffic(make(), keys, args.rounds, args.producers, args.consumers)
            best[name] = min(best.get(name, float("inf")), elapsed)
    cycles = args.keys * args.rounds
    baseline = cycles / best["asyncio.Queue (baseline)"]
    print(
        f"{cycles} add/get/done cycles per run: {args.keys} keys × {args.rounds} rounds, "
        f"{args.producers} producers, {args.consumers} consumers; best of {args.repeats}"
    )
    print(f"{'queue':<40} {'cycles/s':>12} {'ratio':>8}")
    for name, elapsed in best.items():
        rate = cycles / elapsed
        print(f"{name:<40} {rate:>12,.0f} {rate / baseline:>8.2f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000, help="distinct keys per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per run (default 20)")
    parser.add_argument("--producers", type=int, default=4, help="producer tasks (default 4)")
    parser.add_argument("--consumers", type=int, default=8, help="consumer tasks (default 8)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per contender; the best counts (default 3)")
    return parser.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
