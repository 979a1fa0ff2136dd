"""The torch thread count of an evaluation: asked for, from $OMP_NUM_THREADS, or the cores idle now."""

from __future__ import annotations

import os

import pytest

from learnerd.eval import threads


def test_an_explicit_count_then_the_environment_then_the_idle_cores(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.4, 0.0, 0.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.choose_threads(2) == 2
    assert threads.choose_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.choose_threads() == 3  # 8 cores, 5.4 busy
    monkeypatch.setattr(os, "getloadavg", lambda: (30.0, 0.0, 0.0))
    assert threads.choose_threads() == 1  # a loaded machine: one thread, never zero
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert threads.choose_threads() == 8
    with pytest.raises(ValueError, match=">= 0"):
        threads.choose_threads(-1)
