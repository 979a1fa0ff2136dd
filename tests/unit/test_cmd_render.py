"""The status and summary tables' rows of the analyzer's per-format counters (learnerd.cmd._render)."""

from __future__ import annotations

import dataclasses

from learnerd.analyzer.stats import AnalyzerStats
from learnerd.cmd._render import rejected_rows


def test_rejected_rows_name_each_format_of_attempts_then_suggestions():
    stats = AnalyzerStats(rejected_attempts={"codex": 5, "claude-code": 9}, rejected_suggestions={"claude-code": 1})
    assert rejected_rows(dataclasses.asdict(stats)) == [
        ("rejected attempts (claude-code)", 9),
        ("rejected attempts (codex)", 5),
        ("rejected suggestions (claude-code)", 1),
    ]


def test_no_rejected_rows_without_rejections_or_from_an_older_daemon_status():
    assert rejected_rows(dataclasses.asdict(AnalyzerStats())) == []
    assert rejected_rows({"lines_read": 3}) == []
