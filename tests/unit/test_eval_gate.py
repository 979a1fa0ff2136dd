"""The promotion gate's decision table (learnerd.eval.gate): each check passes, fails or does not apply on
reports built by hand, and the candidate is promoted only when no check fails."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from learnerd.eval.gate import decide
from learnerd.eval.report import ProbeResult, Report, Score, Verdict
from learnerd.eval.settings import GateSettings
from learnerd.store.adapters import GateVerdict

GATE = GateSettings()


def recall(name: str, passed: bool) -> ProbeResult:
    verdict = Verdict.PASS if passed else Verdict.FAIL
    return ProbeResult(name, "probe_recall", verdict, float(passed), float(passed), {}, "")


def recalls(outcomes: str) -> list[ProbeResult]:
    """``"ppf"`` → probes r0 (pass), r1 (pass), r2 (fail)."""
    return [recall(f"r{i}", c == "p") for i, c in enumerate(outcomes)]


def drift(fraction: float | None, verdict: Verdict = Verdict.PASS, message: str = "") -> ProbeResult:
    return ProbeResult("calibration_drift", "calibration_drift", verdict, None, fraction, {}, message)


def retention(
    kept: int | None, right: int, verdict: Verdict = Verdict.PASS, message: str = "", wording: int | None = None
) -> ProbeResult:
    fraction = kept / right if kept is not None else None
    evidence: dict = {"kept": kept, "base_right": right} if kept is not None else {}
    if wording is not None and kept is not None:
        evidence |= {"lost_wording": wording, "lost_knowledge": right - kept - wording}
    return ProbeResult("answer_retention", "answer_retention", verdict, fraction, fraction, evidence, message)


def report(*probes: ProbeResult) -> Report:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    return Report("0.1.0", "b", "a", t, t, 0.0, Score(0.5), tuple(probes))


def outcomes(decision) -> dict[str, str]:
    return {c.name: c.outcome for c in decision.checks}


HEALTHY = (drift(0.02), retention(100, 100))


def test_a_first_version_is_promoted_on_the_absolute_checks_alone():
    decision = decide(report(*recalls("ff"), *HEALTHY), None, GATE)
    assert decision.promoted and decision.baseline is None
    assert outcomes(decision) == {
        "evaluation_complete": "pass",
        "probe_recall": "not applicable",
        "calibration_drift": "pass",
        "answer_retention": "pass",
    }


def test_a_first_version_that_forgets_is_rejected():
    decision = decide(report(*recalls("pp"), drift(0.02), retention(90, 100)), None, GATE)
    assert not decision.promoted
    assert decision.reasons == ("answer_retention: kept 90/100 of the base's right answers (90.0% < 95.0%)",)


def test_the_retention_reason_says_how_many_lost_answers_were_lost_in_wording_only():
    decision = decide(report(*recalls("pp"), drift(0.02), retention(60, 65, wording=4)), None, GATE)
    assert not decision.promoted  # every lost answer counts
    assert decision.reasons == (
        "answer_retention: kept 60/65 of the base's right answers (92.3% < 95.0%); "
        "4 of the 5 lost still say the gold led along the base's answer",
    )
    forgot = decide(report(*recalls("pp"), drift(0.02), retention(60, 65, wording=0)), None, GATE)
    assert forgot.reasons == (
        "answer_retention: kept 60/65 of the base's right answers (92.3% < 95.0%); "
        "0 of the 5 lost still say the gold led along the base's answer",
    )
    older = decide(report(*recalls("pp"), drift(0.02), retention(60, 65)), None, GATE)  # a report before the split
    assert older.reasons == ("answer_retention: kept 60/65 of the base's right answers (92.3% < 95.0%)",)


def test_counting_knowledge_leaves_out_the_answers_lost_in_wording_only():
    knowledge = GateSettings(answer_retention_counts="knowledge")
    wording = decide(report(*recalls("pp"), drift(0.02), retention(60, 65, wording=4)), None, knowledge)
    assert wording.promoted
    (check,) = [c for c in wording.checks if c.name == "answer_retention"]
    assert check.detail == "still knows 64/65 of the base's right answers (98.5% >= 95.0%; answers 60/65)"
    forgot = decide(report(*recalls("pp"), drift(0.02), retention(60, 65, wording=1)), None, knowledge)
    assert forgot.reasons == (
        "answer_retention: still knows 61/65 of the base's right answers (93.8% < 95.0%; answers 60/65)",
    )
    unsplit = decide(report(*recalls("pp"), drift(0.02), retention(60, 65)), None, knowledge)  # an older report
    assert unsplit.reasons == ("answer_retention: kept 60/65 of the base's right answers (92.3% < 95.0%)",)


@pytest.mark.parametrize(
    ("current", "candidate", "promoted"),
    [
        ("pppp", "pppp", True),  # unchanged
        ("pppp", "pppf", True),  # one probe worse: tolerated on a small set
        ("pppp", "ppff", False),  # two worse
        ("ppff", "ffpp", True),  # two worse, two better: net 0
        ("pppf", "ffpp", True),  # two worse, one better: net 1
        ("ffff", "pppp", True),  # better
    ],
)
def test_recall_on_a_small_set_tolerates_one_probe_worse_net(current, candidate, promoted):
    decision = decide(
        report(*recalls(candidate), *HEALTHY), report(*recalls(current), *HEALTHY), GATE, current_version=3
    )
    assert decision.promoted is promoted and decision.baseline == 3
    assert outcomes(decision)["probe_recall"] == ("pass" if promoted else "fail")


def test_recall_from_mcnemar_min_pairs_on_is_decided_by_mcnemars_exact_test():
    # 12 probes changed: 8 worse, 4 better. Net 4 worse, but P(X >= 8 | n=12, p=1/2) = 0.194: not significant.
    before, after = "p" * 8 + "f" * 4 + "p" * 20, "f" * 8 + "p" * 4 + "p" * 20
    decision = decide(report(*recalls(after), *HEALTHY), report(*recalls(before), *HEALTHY), GATE, current_version=1)
    assert decision.promoted, decision.checks
    assert "McNemar exact p = 0.1938 >= 0.05" in decision.checks[1].detail
    # 10 changed, all worse: p = 2^-10 < 0.05.
    before, after = "p" * 10 + "p" * 20, "f" * 10 + "p" * 20
    decision = decide(report(*recalls(after), *HEALTHY), report(*recalls(before), *HEALTHY), GATE, current_version=1)
    assert not decision.promoted and "McNemar exact p = 0.0010 < 0.05" in decision.reasons[0]


def test_recall_pairs_probes_by_name_and_ignores_probes_only_one_report_judged():
    current = report(recall("old", True), recall("kept", True), *HEALTHY)
    candidate = report(recall("kept", True), recall("new1", False), recall("new2", False), *HEALTHY)
    decision = decide(candidate, current, GATE, current_version=1)
    assert decision.promoted
    assert decision.checks[1].detail.startswith("1/1 passed (current 1/1)")


def test_recall_does_not_apply_when_no_probe_was_judged_in_both():
    skipped = ProbeResult("r0", "probe_recall", Verdict.SKIP, None, None, {}, "no answer")
    decision = decide(report(skipped, *HEALTHY), report(recall("r0", True), *HEALTHY), GATE, current_version=1)
    assert decision.promoted and outcomes(decision)["probe_recall"] == "not applicable"


def test_an_errored_probe_rejects_the_candidate():
    broken = ProbeResult("delta_kl", "delta_kl", Verdict.ERROR, None, None, {}, "non-finite logits")
    decision = decide(report(*recalls("pp"), broken, *HEALTHY), None, GATE)
    assert not decision.promoted and decision.reasons == ("evaluation_complete: 1 probe(s) errored: delta_kl",)


@pytest.mark.parametrize(("fraction", "promoted"), [(0.0, True), (0.05, True), (0.055, False), (0.69, False)])
def test_calibration_drift_rejects_more_than_five_percent_of_items_regressed(fraction, promoted):
    decision = decide(report(*recalls("p"), drift(fraction), retention(100, 100)), None, GATE)
    assert decision.promoted is promoted
    assert outcomes(decision)["calibration_drift"] == ("pass" if promoted else "fail")


@pytest.mark.parametrize(("kept", "promoted"), [(100, True), (95, True), (94, False), (0, False)])
def test_answer_retention_rejects_keeping_less_than_95_percent_of_the_bases_right_answers(kept, promoted):
    decision = decide(report(*recalls("p"), drift(0.0), retention(kept, 100)), None, GATE)
    assert decision.promoted is promoted


def test_skipped_retention_probes_do_not_block():
    no_sway = drift(None, Verdict.SKIP, "dlm-sway is not installed")
    no_knowledge = retention(None, 0, Verdict.SKIP, "the base model answers none of the 130 general questions right")
    decision = decide(report(*recalls("p"), no_sway, no_knowledge), None, GATE)
    assert decision.promoted
    assert outcomes(decision)["calibration_drift"] == outcomes(decision)["answer_retention"] == "not applicable"


def test_drift_does_not_gate_a_base_without_general_knowledge():
    """The built-in random tiny model answers no general question right: nothing to lose, however the
    log-probabilities of sway's items move."""
    no_knowledge = retention(None, 0, Verdict.SKIP, "the base model answers none of the 130 general questions right")
    decision = decide(report(*recalls("p"), drift(0.69, Verdict.FAIL), no_knowledge), None, GATE)
    assert decision.promoted
    assert outcomes(decision)["calibration_drift"] == "not applicable"
    assert "no general knowledge to lose" in decision.checks[2].detail


def test_thresholds_come_from_the_gate_settings():
    strict = GateSettings(max_recall_regressions=0, max_fraction_regressed=0.01, min_answer_retention=1.0)
    current = report(*recalls("pp"), *HEALTHY)
    decision = decide(report(*recalls("pf"), drift(0.02), retention(99, 100)), current, strict, current_version=2)
    assert [c.outcome for c in decision.checks] == ["pass", "fail", "fail", "fail"]


def test_the_verdict_round_trips_through_its_dict():
    decision = decide(report(*recalls("pf"), *HEALTHY), report(*recalls("pp"), *HEALTHY), GATE, current_version=2)
    verdict = decision.verdict(datetime(2026, 3, 1, tzinfo=UTC))
    assert verdict.outcome == "promoted" and verdict.baseline == 2 and verdict.decided_at == "2026-03-01T00:00:00+00:00"
    assert GateVerdict.from_dict(verdict.to_dict()) == verdict
