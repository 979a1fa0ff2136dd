"""Rate-limited logging: one line per kind per interval, carrying the exact count it stands for."""

from __future__ import annotations

import structlog

from learnerd.runtime.log_throttle import LogThrottle


def test_one_line_per_kind_per_interval_with_the_suppressed_count() -> None:
    now = [0.0]
    throttle = LogThrottle(interval_s=10.0, clock=lambda: now[0])
    with structlog.testing.capture_logs() as logs:
        for i in range(1000):  # a flood within one interval: one line
            now[0] = i * 0.005
            throttle.warning("refused", "request refused", n=i)
        throttle.warning("other", "another kind is not held back")
        now[0] = 10.0
        throttle.warning("refused", "request refused", n=1000)
    assert [(e["event"], e["suppressed"], e.get("n")) for e in logs] == [
        ("request refused", 0, 0),
        ("another kind is not held back", 0, None),
        ("request refused", 999, 1000),
    ]
    assert throttle.counts == {"refused": 1001, "other": 1}
    assert {e["log_level"] for e in logs} == {"warning"}


def test_a_burst_is_logged_at_once_then_the_window_holds_the_rest(monkeypatch) -> None:
    now = [0.0]
    throttle = LogThrottle(interval_s=10.0, clock=lambda: now[0], burst=3)
    logged = [throttle.warning("k", "event") for _ in range(5)]
    assert logged == [True, True, True, False, False]
    now[0] = 10.0
    assert throttle.warning("k", "event") and throttle.counts["k"] == 6
