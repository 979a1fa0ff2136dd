"""next_cycle_eta_s: debounce remaining + the training queue ahead (shared by the workers) + one cycle."""

from __future__ import annotations

import pytest

from learnerd.sources.cycle_eta import PRIOR_CYCLE_S, WINDOW, CycleEta


def eta(*, debounce=None, queued=0, in_flight=None, recent=(), workers=1, now=100.0) -> CycleEta:
    return CycleEta(
        debounce_remaining=lambda key: debounce,
        queued=lambda: queued,
        in_flight=lambda: in_flight or {},
        recent_cycles_s=lambda: recent,
        workers=workers,
        clock=lambda: now,
    )


def test_idle_daemon_one_cycle_after_the_debounce():
    assert eta(debounce=1.5, recent=[10.0, 20.0])("d") == pytest.approx(1.5 + 15.0)
    assert eta()("d") == PRIOR_CYCLE_S  # nothing measured yet


def test_queue_and_cycles_in_flight_come_first():
    # c = 10; two queued (20 s); one cycle in flight for 4 s (6 s left); then ours (10 s)
    e = eta(debounce=2.0, queued=2, in_flight={"other": 96.0}, recent=[10.0])
    assert e("d") == pytest.approx(2.0 + 20.0 + 6.0 + 10.0)
    # two workers share the work ahead
    e2 = eta(debounce=2.0, queued=2, in_flight={"other": 96.0}, recent=[10.0], workers=2)
    assert e2("d") == pytest.approx(2.0 + 13.0 + 10.0)
    # an overrunning cycle counts as finishing now, not as negative time
    assert eta(in_flight={"slow": 0.0}, recent=[10.0])("d") == pytest.approx(10.0)


def test_cycle_estimate_is_the_mean_of_the_recent_window():
    recent = [1000.0] + [10.0] * WINDOW
    assert eta(recent=recent).cycle_s() == pytest.approx(10.0)
