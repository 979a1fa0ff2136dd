"""``StepProgress``: the pace is measured from the first step seen, so loading a model before it does not
count; the time left is the remaining steps at that pace. ``ProgressBoard``: keys begin, update, end."""

from __future__ import annotations

import pytest

from learnerd.runtime.progress import MEASURES, ProgressBoard, StepProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_time_before_the_first_step_is_not_a_step():
    clock = FakeClock()
    p = StepProgress(clock)
    clock.now += 30.0  # loading the model
    p.update(1, 10)
    assert p.seconds_per_step() is None and p.eta_s() is None
    clock.now += 2.0
    p.update(2)
    clock.now += 2.0
    p.update(3)
    assert p.seconds_per_step() == pytest.approx(2.0)
    assert p.eta_s() == pytest.approx(7 * 2.0)
    clock.now += 1.5  # half-way through step 4
    assert p.eta_s() == pytest.approx(7 * 2.0 - 1.5)
    assert p.elapsed_s() == pytest.approx(35.5)


def test_a_known_total_is_kept_and_json_names_every_measure():
    clock = FakeClock()
    p = StepProgress(clock)
    p.update(0, 4)
    p.update(1)
    assert p.total == 4
    assert tuple(p.to_json()) == MEASURES


def test_the_board_shows_keys_in_flight_with_their_fields_until_they_end():
    clock = FakeClock()
    board = ProgressBoard(clock)
    board.begin("a.dlm", 8, version="v0002")
    board.update("a.dlm", 1, loss=0.5)
    board.update("gone.dlm", 3)  # never began: ignored
    snap = board.snapshot()
    assert set(snap) == {"a.dlm"}
    assert snap["a.dlm"]["step"] == 1 and snap["a.dlm"]["total"] == 8
    assert snap["a.dlm"]["version"] == "v0002" and snap["a.dlm"]["loss"] == 0.5
    board.end("a.dlm")
    assert board.snapshot() == {}


def test_a_new_phase_starts_a_new_count_and_pace_and_keeps_the_fields():
    clock = FakeClock()
    board = ProgressBoard(clock)
    board.begin("a.dlm", doc_key="01ABC")
    board.update("a.dlm", 0, 40, phase="base answers", unit="answer")
    for done in (10, 20):
        clock.now += 30.0
        board.update("a.dlm", done, 40, phase="base answers")
    assert board.snapshot()["a.dlm"]["s_per_step"] == pytest.approx(3.0)
    clock.now += 5.0
    board.update("a.dlm", 1, 100, phase="training step", unit="step", loss=2.5)
    snap = board.snapshot()["a.dlm"]
    assert (snap["phase"], snap["unit"], snap["step"], snap["total"]) == ("training step", "step", 1, 100)
    assert snap["s_per_step"] is None and snap["elapsed_s"] == 0.0, "the pace and the clock are the new phase's"
    assert snap["doc_key"] == "01ABC" and snap["loss"] == 2.5
