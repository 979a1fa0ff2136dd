"""How many torch threads training, evaluation and serving use: chosen here, for all three.

torch's default is one intra-op thread per core. On a machine another process keeps busy, that is the worst
choice: every operation ends at a barrier that waits for its slowest thread, and the thread that shares a core
with the busy process gets a fraction of it (a fifth or less for the training process at nice 10), so the whole
step runs at that fraction. The README's tiny quick start took 633 s beside one busy process on 2 cores, 51 s
on one thread (``benchmarks/bench_shared_cores.py`` measures it). So:

* **the count** (:func:`choose_threads`) is the setting when it is above 0, else ``$OMP_NUM_THREADS`` when set,
  else the cores free now (:class:`CoreMeter`): the cores this process may run on (``os.sched_getaffinity``)
  minus the CPU time other processes used on them over the last interval (``/proc/stat`` through
  ``psutil.cpu_times(percpu=True)``, less this process's own), rounded half up, at least 1. One busy process
  costs the count one core: it gets its share of the cores, and no thread of ours waits on it.
* **the wait policy**: an OpenMP thread without work sleeps instead of spinning (``OMP_WAIT_POLICY=PASSIVE``,
  :data:`OPENMP_ENV`, :func:`passive_openmp`), so threads waiting at a barrier leave their core to whoever needs
  it. OpenMP reads it once, when torch loads: the CLI sets it at start-up and the training process inherits it.
  A value already in the environment wins.

Training chooses at start and again every :data:`RECHOOSE_INTERVAL_S` of steps (:class:`ThreadGovernor`);
evaluation at its start; serving before each generation, keeping one core for the event loop.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, MutableMapping

OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
"""OpenMP's settings for a shared machine: idle threads sleep at once (GNU OpenMP's ``OMP_WAIT_POLICY``, Intel
OpenMP's ``KMP_BLOCKTIME`` in ms)."""
SAMPLE_S = 0.5
"""The first measurement of the free cores watches the CPU for this long (seconds); later ones use the time
since the previous one."""
RECHOOSE_INTERVAL_S = 30.0
"""A training process measures the free cores again after this many seconds of steps."""


def passive_openmp(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set :data:`OPENMP_ENV` in ``environ`` where it is not set already; call it before torch is imported."""
    for name, value in OPENMP_ENV.items():
        environ.setdefault(name, value)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_seconds() -> tuple[float, float]:
    """``(busy, own)``: CPU seconds the cores this process may run on spent busy since boot (stolen time counts as
    busy), and CPU seconds this process spent (``psutil``; Linux reads ``/proc/stat``)."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    try:
        chosen = [per_cpu[i] for i in sorted(os.sched_getaffinity(0)) if i < len(per_cpu)]
    except AttributeError:  # not on Linux
        chosen = per_cpu
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    own = psutil.Process().cpu_times()
    return sum(getattr(t, name, 0.0) for t in chosen for name in fields), own.user + own.system


class CoreMeter:
    """The cores free for this process: :func:`usable_cores` less the cores other processes kept busy since the
    previous measurement — the busy CPU time of those cores less this process's own. A measurement comes at most
    every ``sample_s``: sooner, the last one is returned again (the first call waits until ``sample_s`` has passed
    since the meter was made).

    Args:
        sample_s: the shortest interval measured (seconds).
        clock: monotonic seconds.
        cpu_seconds: ``() -> (busy, own)`` CPU seconds (:func:`cpu_seconds`).
    """

    def __init__(
        self,
        sample_s: float = SAMPLE_S,
        clock: Callable[[], float] = time.monotonic,
        cpu_seconds: Callable[[], tuple[float, float]] = cpu_seconds,
    ) -> None:
        self._sample_s = sample_s
        self._clock = clock
        self._cpu_seconds = cpu_seconds
        self._last = (clock(), *cpu_seconds())
        self._others: float | None = None

    def others(self) -> float:
        """Cores the other processes used on average over the interval measured (>= 0)."""
        elapsed = self._clock() - self._last[0]
        if elapsed < self._sample_s:
            if self._others is not None:
                return self._others
            time.sleep(self._sample_s - elapsed)
        when, (busy, own) = self._clock(), self._cpu_seconds()
        last_when, last_busy, last_own = self._last
        self._last = (when, busy, own)
        self._others = max(0.0, ((busy - last_busy) - (own - last_own)) / max(when - last_when, 1e-9))
        return self._others

    def free(self) -> float:
        """Cores free for this process's threads (>= 0)."""
        return max(0.0, usable_cores() - self.others())


def choose_threads(requested: int = 0, meter: CoreMeter | None = None, *, reserve: int = 0) -> int:
    """``requested`` when > 0, else ``$OMP_NUM_THREADS`` when it is a positive integer, else the free cores
    (``meter``'s, a fresh :class:`CoreMeter` by default) less ``reserve``, rounded half up; always >= 1.

    Raises:
        ValueError: ``requested`` < 0.
    """
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: choose), not {requested}")
    if requested:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    free = (meter or CoreMeter()).free() - reserve
    return max(1, min(usable_cores(), int(free + 0.5)))


def set_torch_threads(requested: int = 0, meter: CoreMeter | None = None) -> int:
    """``torch.set_num_threads(choose_threads(requested, meter))`` (the calling thread's count); the count set."""
    import torch

    threads = choose_threads(requested, meter)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


class ThreadGovernor:
    """Keeps a long computation's torch thread count at :func:`choose_threads`: call :meth:`tick` between steps;
    every ``interval_s`` it measures the free cores over the interval just past and sets the count again. A
    ``requested`` count (> 0) is set once and kept.

    Args:
        requested: the setting (0: choose).
        interval_s: seconds between two measurements.
        clock: monotonic seconds.
        meter: what measures the free cores (a :class:`CoreMeter` on ``clock`` by default).
    """

    def __init__(
        self,
        requested: int = 0,
        interval_s: float = RECHOOSE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        meter: CoreMeter | None = None,
    ) -> None:
        self._requested = requested
        self._interval_s = interval_s
        self._clock = clock
        self._meter = meter or CoreMeter(clock=clock)
        self.threads = set_torch_threads(requested, self._meter)
        self._since = clock()

    def tick(self) -> int:
        """Set the count again when ``interval_s`` has passed (not with a requested count); the count now."""
        if not self._requested and self._clock() - self._since >= self._interval_s:
            self.threads = set_torch_threads(0, self._meter)
            self._since = self._clock()
        return self.threads


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run the ``with`` block on ``threads`` torch intra-op threads in the calling thread, then restore its
    count (OpenMP keeps the count per thread, so other threads are unaffected)."""
    import torch

    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if before != threads:
            torch.set_num_threads(before)
