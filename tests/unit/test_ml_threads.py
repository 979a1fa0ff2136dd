"""How many torch threads training, evaluation and serving use (learnerd/ml/threads.py): the setting, then
$OMP_NUM_THREADS, then the cores other processes leave free; OpenMP waits passively in learnerd's processes."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from learnerd.ml import threads
from learnerd.ml.threads import CoreMeter, ThreadGovernor, choose_threads, intra_op_threads, passive_openmp


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Machine:
    """Scripted CPU seconds: ``others`` cores busy with other processes and ``own`` with this one, per second."""

    def __init__(self, clock: FakeClock, others: float, own: float = 0.0) -> None:
        self.clock, self.others, self.own = clock, others, own
        self.busy_s = self.own_s = 0.0
        self.at = clock.now

    def __call__(self) -> tuple[float, float]:
        elapsed, self.at = self.clock.now - self.at, self.clock.now
        self.busy_s += (self.others + self.own) * elapsed
        self.own_s += self.own * elapsed
        return self.busy_s, self.own_s


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_the_setting_then_the_environment_then_the_free_cores(eight_cores, monkeypatch):
    clock = FakeClock()
    meter = CoreMeter(sample_s=1.0, clock=clock, cpu_seconds=Machine(clock, others=5.4, own=2.0))
    clock.now += 10.0
    assert choose_threads(2, meter) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads(0, meter) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert choose_threads(0, meter) == 3, "8 cores, 5.4 busy with others: this process's own 2 do not count"
    assert choose_threads(0, meter, reserve=1) == 2
    with pytest.raises(ValueError, match=">= 0"):
        choose_threads(-1, meter)


def test_a_busy_machine_leaves_one_thread_and_an_idle_one_every_core(eight_cores):
    clock = FakeClock()
    busy = CoreMeter(sample_s=1.0, clock=clock, cpu_seconds=Machine(clock, others=30.0))
    idle = CoreMeter(sample_s=1.0, clock=clock, cpu_seconds=Machine(clock, others=0.0, own=8.0))
    clock.now += 5.0
    assert choose_threads(0, busy) == 1, "never zero"
    assert choose_threads(0, idle) == 8


def test_the_meter_measures_the_interval_since_its_last_measurement_at_most_every_sample(eight_cores):
    clock = FakeClock()
    machine = Machine(clock, others=1.0)
    meter = CoreMeter(sample_s=2.0, clock=clock, cpu_seconds=machine)
    clock.now += 10.0
    assert meter.others() == pytest.approx(1.0)
    machine.others = 3.0
    clock.now += 1.0
    assert meter.others() == pytest.approx(1.0), "sooner than sample_s: the last measurement again"
    clock.now += 1.0
    assert meter.others() == pytest.approx(3.0) and meter.free() == pytest.approx(5.0)


def test_a_training_process_follows_the_free_cores_every_interval(eight_cores, one_torch_thread):
    clock = FakeClock()
    machine = Machine(clock, others=7.0, own=1.0)
    meter = CoreMeter(sample_s=1.0, clock=clock, cpu_seconds=machine)
    clock.now += 1.0
    governor = ThreadGovernor(interval_s=30.0, clock=clock, meter=meter)
    assert governor.threads == torch.get_num_threads() == 1
    machine.others = 0.0  # the other process ended
    clock.now += 10.0
    assert governor.tick() == 1, "not before the interval"
    clock.now += 25.0
    assert governor.tick() == torch.get_num_threads() == 8, "the 35 s since the first measurement: all free"
    assert ThreadGovernor(3, clock=clock, meter=meter).tick() == torch.get_num_threads() == 3


def test_openmp_waits_passively_unless_the_environment_says_otherwise():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    passive_openmp(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE", "KMP_BLOCKTIME": "0"}
    fresh: dict[str, str] = {}
    passive_openmp(fresh)
    assert fresh["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_training_process_is_started_with_a_passive_openmp(monkeypatch):
    from learnerd.training.runner import _child_env

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _child_env()["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_real_meter_reads_this_machine():
    meter = CoreMeter(sample_s=0.05)
    others = meter.others()
    assert others >= 0.0 and 0.0 <= meter.free() <= threads.usable_cores() <= (os.cpu_count() or 1)


def test_intra_op_threads_sets_this_threads_count_and_restores_it():
    before = torch.get_num_threads()
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(torch.get_num_threads).result()  # a running thread, its count initialised
        with intra_op_threads(before + 2):
            assert torch.get_num_threads() == before + 2
            assert pool.submit(torch.get_num_threads).result() == other  # the count is kept per thread
    assert torch.get_num_threads() == before
