"""``plot_history``: the history's PNG gains a second panel, the training loss per step, when losses are given."""

import struct

import pytest

from learnerd.eval.history import HistoryPoint, plot_history


def size(path) -> tuple[int, int]:
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG")
    return struct.unpack(">II", png[16:24])  # the IHDR chunk's width and height


def point(version: int, **kw) -> HistoryPoint:
    return HistoryPoint(version, f"v{version:04d}", 2, 2, 0.7, "healthy", {"pass": 2}, "2026-11-25T16:00:00", **kw)


def test_losses_add_a_loss_panel_below_the_scores(tmp_path):
    points = [point(1), point(2, retention={"calibration_drift": 0.1, "answer_retention": 0.96})]
    plot_history(points, tmp_path / "plain.png", title="t")
    plot_history(points, tmp_path / "curves.png", title="t", losses={"v0001": [2.0, 1.0], "v0002": [0.5, 0.1]})
    plot_history(points, tmp_path / "empty.png", title="t", losses={"v0001": []})
    assert size(tmp_path / "plain.png") == size(tmp_path / "empty.png") == (700, 400)
    assert size(tmp_path / "curves.png") == (700, 750)


def test_no_points_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no evaluated version"):
        plot_history([], tmp_path / "x.png", title="t", losses={"v0001": [1.0]})
