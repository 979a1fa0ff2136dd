"""The composite score: categories, weights, bands, findings."""

from __future__ import annotations

import pytest

from learnerd.eval.report import ProbeResult, Verdict
from learnerd.eval.score import band, compute_score, explain_band, recall_counts


def probe(name, kind, verdict, score, weight=None):
    evidence = {} if weight is None else {"weight": weight}
    return ProbeResult(name, kind, Verdict(verdict), score, None, evidence, f"{name} says so")


def test_categories_weights_and_band():
    probes = [
        probe("null", "null_adapter", "pass", 1.0),
        probe("r1", "probe_recall", "pass", 1.0, 0.5),
        probe("r2", "probe_recall", "fail", 0.2, 0.5),
        probe("dk", "delta_kl", "pass", 0.9),
        probe("mt", "multi_turn_coherence_decay", "skip", None),
        probe("sis", "section_internalization", "fail", 0.25),
        probe("broken", "delta_kl", "error", None),
    ]
    score = compute_score(probes)
    adherence = (0.5 * 1.0 + 0.5 * 0.2 + 1.0 * 0.9) / 2.0
    assert score.components == {"baseline": 1.0, "adherence": pytest.approx(adherence), "attribution": 0.25}
    assert score.overall == pytest.approx((0.30 * adherence + 0.35 * 0.25) / 0.65)
    assert score.band == "partial"
    assert score.findings[0] == "probe recall 1/2 (50%)"
    assert "sis (section_internalization) failed: sis says so" in score.findings
    assert score.findings[-1].startswith("1 probe(s) errored")
    assert recall_counts(probes) == (1, 2)


@pytest.mark.parametrize(
    ("overall", "expected"),
    [(0.1, "noise"), (0.3, "partial"), (0.6, "healthy"), (0.85, "healthy"), (0.9, "suspicious")],
)
def test_bands(overall, expected):
    assert band(overall) == expected


def test_nothing_scored_is_zero():
    score = compute_score([probe("mt", "multi_turn_coherence_decay", "skip", None)])
    assert (score.overall, score.band, score.components) == (0.0, "noise", {})


def test_a_suspicious_band_says_why():
    recall = [probe(f"r{i}", "probe_recall", "pass" if i < 17 else "fail", 1.0 if i < 17 else 0.4) for i in range(18)]
    probes = [*recall, probe("dk", "delta_kl", "pass", 0.99), probe("sis", "section_internalization", "pass", 1.0)]
    score = compute_score(probes)
    assert score.band == "suspicious"  # sway's name stays in the report
    line = explain_band(score, probes)
    assert line.startswith("suspicious (above 0.85: sway's flag for a possible overfit or memorisation")
    assert "probe recall 17/18: expected for an adapter trained on its probes" in line
    assert f"attribution {score.components['attribution']:.2f}" in line and "baseline" not in line
    healthy = compute_score([probe("dk", "delta_kl", "pass", 0.7)])
    assert explain_band(healthy, []) == "healthy (0.6 to 0.85: healthy; adherence 0.70)"
