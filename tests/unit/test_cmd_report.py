"""The ``learnerd run --once`` summary table (learnerd.cmd._report)."""

from __future__ import annotations

from learnerd.analyzer.stats import AnalyzerStats
from learnerd.cmd._report import print_summary
from learnerd.daemon.app import RunSummary


def test_the_summary_shows_rejected_attempts_and_suggestions_per_format(capsys):
    stats = AnalyzerStats(rejected_attempts={"claude-code": 9, "codex": 5}, rejected_suggestions={"claude-code": 1})
    summary = RunSummary(
        blocks=141, examples=0, vectors=0, embedder_calls=0, elapsed_s=1.0, analyzer=stats, controllers={}
    )
    print_summary(summary, False, "learnerd run --once")
    rows = [line.strip("│ ").split() for line in capsys.readouterr().out.splitlines()]
    assert ["rejected", "attempts", "(claude-code)", "│", "9"] in rows
    assert ["rejected", "attempts", "(codex)", "│", "5"] in rows
    assert ["rejected", "suggestions", "(claude-code)", "│", "1"] in rows
