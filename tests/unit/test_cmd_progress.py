"""Line progress off a terminal: a line when a task starts, then at every tenth of its total or every
``LINE_INTERVAL_S`` seconds, and a last line when it ends — never one per step."""

from __future__ import annotations

import io

from learnerd.cmd._progress import LINE_INTERVAL_S, LineDisplay
from learnerd.cmd._render import progress_line


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_hundred_steps_print_a_line_per_tenth_with_pace_and_time_left():
    clock, out = FakeClock(), io.StringIO()
    display = LineDisplay(out, clock)
    display.update("train notes.dlm", 0)
    for step in range(1, 101):
        clock.now += 0.5
        display.update("train notes.dlm", step, 100, loss=f"{1 / step:.4f}")
    display.finish("train notes.dlm")
    lines = out.getvalue().splitlines()
    assert lines[0] == "train notes.dlm: starting"
    assert lines[-1] == "train notes.dlm: step 100/100 · 0.5 s/step · loss 0.0100 · done in 50s"
    steps = [line.split("step ")[1].split(" ")[0] for line in lines[1:-1]]
    assert steps == [f"{n}/100" for n in (10, 20, 30, 40, 50, 60, 70, 80, 90)]
    assert lines[6].endswith("· ETA 20s")  # after step 60: 40 steps left at 0.5 s


def test_slow_steps_print_a_line_at_least_every_interval():
    clock, out = FakeClock(), io.StringIO()
    display = LineDisplay(out, clock)
    display.update("eval notes.dlm", 1, 1000)
    for step in range(2, 6):
        clock.now += LINE_INTERVAL_S
        display.update("eval notes.dlm", step)
    assert len(out.getvalue().splitlines()) == 5


def test_an_interrupted_task_says_where_it_stopped():
    clock, out = FakeClock(), io.StringIO()
    display = LineDisplay(out, clock)
    display.update("backfill", 3, 10, unit="block")
    clock.now += 5.0
    display.close(stopped=True)
    assert out.getvalue().splitlines()[-1] == "backfill: block 3/10 · stopped after 5s"


def test_a_line_without_steps_or_pace_says_starting():
    line = progress_line({"step": 0, "total": None, "elapsed_s": 0.0, "s_per_step": None, "eta_s": None})
    assert line == "starting"


def test_each_phase_prints_a_line_and_counts_its_own_units_and_pace():
    """A training task: the base's answers (slow), then its steps (fast); the pace and the time left are the
    phase's own, and the last line says how long the whole task took."""
    clock, out = FakeClock(), io.StringIO()
    display = LineDisplay(out, clock)
    display.update("train notes.dlm", 0)
    display.update("train notes.dlm", 0, 40, phase="base answers", unit="answer")
    for done in (16, 32, 40):
        clock.now += 160.0
        display.update("train notes.dlm", done, 40, phase="base answers", unit="answer")
    for step in range(1, 21):
        clock.now += 2.0
        display.update("train notes.dlm", step, 20, phase="training step", unit="step", loss="0.5", cpu_share=0.97)
    display.finish("train notes.dlm")
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["train notes.dlm: starting", "train notes.dlm: base answers 0/40"]
    assert "train notes.dlm: base answers 32/40 · 10 s/answer · ETA 1m" in lines
    assert lines[-1] == "train notes.dlm: training step 20/20 · 2 s/step · loss 0.5 · cpu 97% · done in 8m"
    first_step = next(line for line in lines if "training step" in line)
    assert first_step == "train notes.dlm: training step 1/20 · loss 0.5 · cpu 97%", "a new phase, no pace yet"


def test_a_status_line_shows_the_phase_and_the_process_usage():
    progress = {"step": 40, "total": 152, "elapsed_s": 600.0, "s_per_step": 13.0, "eta_s": 1456.0}
    usage = {"phase": "base answers", "unit": "answer", "cpu_share": 0.5, "rss_mb": 1200.0, "peak_rss_mb": 1536.0}
    line = progress_line({**progress, **usage, "doc_key": None})
    assert line == "base answers 40/152 · 13 s/answer · cpu 50% · rss 1.2 GiB (peak 1.5 GiB) · ETA 24m"
    loading = {"step": 0, "total": None, "elapsed_s": 1.0, "s_per_step": None, "eta_s": None, "phase": "loading base"}
    assert progress_line(loading) == "loading base"
