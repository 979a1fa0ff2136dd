"""Harvest planning against the real sway report and hand-made ones."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from learnerd.eval.harvest import (
    MalformedReportError,
    NoReferenceError,
    SkipReason,
    apply_plan,
    auto_harvest,
    load_harvest_report,
    plan_harvest,
    revert_harvest,
)
from learnerd.eval.report import ProbeResult, Report, Score, Verdict, load_report
from learnerd.store.dlm import parse_text, read_document

FM = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: smollm2-135m\n---\n\n# Notes\n"


def report_of(*probes: ProbeResult) -> Report:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    return Report("s", "base", "adapter", t, t, 0.0, Score(0.5), probes)


def failing(name: str, kind: str = "delta_kl", **evidence: object) -> ProbeResult:
    return ProbeResult(name, kind, Verdict.FAIL, 0.1, 0.2, evidence, "")


def test_real_report_plan(peer_data: Path) -> None:
    document = read_document(peer_data / "dlm/audit/the-doc.dlm")
    report = load_report(peer_data / "dlm/audit/sway-results.json")
    cal = next(p for p in report.probes if p.kind == "calibration_drift")
    assert cal.verdict == Verdict.PASS and len(cal.evidence["worst_offenders"]) == 5
    # a passing calibration_drift lists its worst general-knowledge items too: they are not harvested
    assert plan_harvest(document, report).additions == ()
    failing_cal = replace(cal, verdict=Verdict.FAIL)
    report = replace(report, probes=tuple(failing_cal if p is cal else p for p in report.probes))
    plan = plan_harvest(document, report)
    # sway's calibration items judge every candidate: a failing calibration_drift's are sealed, never written
    assert plan.additions == ()
    assert [(s.candidate.prompt, s.candidate.reference) for s in plan.skipped][:2] == [
        ("The Eiffel Tower is in", " Paris"),
        ("The pyramids of Giza are in", " Egypt"),
    ]
    assert {s.reason for s in plan.skipped} == {SkipReason.SEALED} and {s.candidate.origin for s in plan.skipped} == {
        f"evidence.worst_offenders[{i}]" for i in range(5)
    }
    assert plan.skipped[0].detail == "one of sway's calibration items, which judge every candidate"
    sis = next(p for p in report.probes if p.kind == "section_internalization")
    failed = [e["section_id"] for e in sis.evidence["per_section"] if not e["passed"]]
    assert [u.section_id for u in plan.undertrained] == failed and len(failed) == 34
    assert all(u.section is not None and u.section.section_id == u.section_id for u in plan.undertrained)
    assert [u.name for u in plan.unharvestable] == ["dk_fortran", "abl_fortran"]
    with pytest.raises(NoReferenceError, match="dk_fortran"):
        plan_harvest(document, report, strict=True)


def test_prompt_reference_candidates_confidence_and_dedup() -> None:
    document = parse_text(FM)
    report = report_of(
        failing("a", prompt="What is X?", reference="X is Y.", confidence=0.9),
        failing("b", prompt="Low?", reference="yes", confidence=0.2),
        failing("c", prompt="What is X?", reference="X is Y."),  # same pair as "a": one section
        failing("d", prompt="q", reference="```\nopen code block"),
        ProbeResult("e", "delta_kl", Verdict.PASS, 1.0, 0.0, {"prompt": "passing", "reference": "ignored"}, ""),
    )
    plan = plan_harvest(document, report, tag="night", min_confidence=0.5)
    assert [a.candidate.probe_name for a in plan.additions] == ["a"]
    assert plan.additions[0].section.harvest_source == "night/a"
    assert {(s.candidate.probe_name, s.reason) for s in plan.skipped} == {
        ("b", SkipReason.BELOW_CONFIDENCE),
        ("c", SkipReason.ALREADY_PRESENT),
        ("d", SkipReason.UNREPRESENTABLE),
    }
    assert plan.unharvestable == ()
    applied = parse_text(apply_plan(document, plan).to_text())
    again = plan_harvest(applied, report, tag="other", min_confidence=0.5)
    assert again.additions == () and {s.reason for s in again.skipped} >= {SkipReason.ALREADY_PRESENT}


def test_a_section_in_dlms_own_layout_counts_as_present() -> None:
    dlm_written = (
        FM + '\n::instruction::\n<!-- dlm-auto-harvest: source="auto-harvest/a" -->\n### Q !probe\nQ?\n\n### A\nA.\n'
    )
    plan = plan_harvest(parse_text(dlm_written), report_of(failing("a", prompt="Q?", reference="A.")))
    assert plan.additions == () and plan.skipped[0].reason == SkipReason.ALREADY_PRESENT


def test_failing_probes_without_reference() -> None:
    report = report_of(failing("kl", prompt="only a prompt"), failing("cal", "calibration_drift", worst_offenders=[]))
    plan = plan_harvest(parse_text(FM), report)
    assert [(u.name, u.kind) for u in plan.unharvestable] == [("kl", "delta_kl"), ("cal", "calibration_drift")]
    with pytest.raises(NoReferenceError, match="kl \\(delta_kl\\), cal"):
        plan_harvest(parse_text(FM), report, strict=True)


def test_auto_harvest_then_revert_restores_the_document(peer_copy) -> None:
    path = peer_copy("dlm/gallery/shell-one-liner.dlm")
    original = path.read_bytes()
    report = report_of(failing("a", prompt="Delete empty dirs?", reference="`find . -type d -empty -delete`"))
    dry = auto_harvest(path, report, apply=False)
    assert not dry.written and path.read_bytes() == original and len(dry.plan.additions) == 1
    done = auto_harvest(path, report)
    assert done.written and read_document(path).auto_sections()[0].qa_pairs()[0].question == "Delete empty dirs?"
    assert not auto_harvest(path, report).written  # the same report again adds nothing
    assert [s.harvest_source for s in revert_harvest(path, apply=False)] == ["auto-harvest/a"]
    assert len(revert_harvest(path)) == 1 and path.read_bytes() == original


PROBE_DOC = FM + "\n::instruction::\n### Q !probe\nQ1?\n### A\nA1.\n### Q !probe\nQ2?\n### A\nA2.\n"


def test_reinforce_writes_one_plain_copy_of_a_probe_the_document_already_has(tmp_path: Path) -> None:
    path = tmp_path / "doc.dlm"
    path.write_text(PROBE_DOC)
    report = report_of(failing("recall_1", "probe_recall", prompt="Q1?", reference="A1.", confidence=0.8))
    plain = plan_harvest(read_document(path), report)  # dlm's rule: a second, identical !probe section
    assert [(a.reinforcement, a.section.qa_pairs()[0].probe) for a in plain.additions] == [(False, True)]
    result = auto_harvest(path, report, reinforce=True)
    assert result.written and [a.reinforcement for a in result.plan.additions] == [True]
    added = read_document(path).sections[-1]
    assert added.harvest_source == "auto-harvest/recall_1"
    assert [(p.question, p.answer, p.probe) for p in added.qa_pairs()] == [("Q1?", "A1.", False)]
    again = auto_harvest(path, report, reinforce=True)  # level-triggered: the same report again writes nothing
    assert not again.written and again.plan.skipped[0].reason == SkipReason.ALREADY_PRESENT


def test_reinforce_adds_an_unknown_pair_as_a_probe_once(tmp_path: Path) -> None:
    path = tmp_path / "doc.dlm"
    path.write_text(PROBE_DOC)
    report = report_of(failing("ext", "probe_recall", prompt="New?", reference="Yes."))
    first = auto_harvest(path, report, reinforce=True)
    assert [a.reinforcement for a in first.plan.additions] == [False]
    assert read_document(path).sections[-1].qa_pairs()[0].probe
    assert not auto_harvest(path, report, reinforce=True).written


def test_reinforce_removes_copies_whose_probe_was_edited_away(tmp_path: Path) -> None:
    path = tmp_path / "doc.dlm"
    path.write_text(PROBE_DOC)
    auto_harvest(path, report_of(failing("recall_1", "probe_recall", prompt="Q1?", reference="A1.")), reinforce=True)
    auto_harvest(path, report_of(failing("ext", "probe_recall", prompt="New?", reference="Yes.")), reinforce=True)
    path.write_text(
        path.read_text().replace("### A\nA1.\n", "### A\nA1, revised.\n", 1)
    )  # the person edits Q1's answer
    result = auto_harvest(path, report_of(), reinforce=True)
    assert result.written and [s.harvest_source for s in result.removed] == ["auto-harvest/recall_1"]
    left = [s.harvest_source for s in read_document(path).sections if s.harvest_source]
    assert left == ["auto-harvest/ext"]  # a harvested probe is not a copy: it stays
    assert not auto_harvest(path, report_of(), reinforce=True).written


def test_a_report_is_read_with_dlms_requirements_only(tmp_path: Path) -> None:
    """dlm's harvest needs ``schema_version`` (an integer, at most 1) and ``probes``; nothing of the rest of
    sway's envelope. Entries that are not objects are ignored, as dlm ignores them."""
    path = tmp_path / "r.json"
    minimal = {
        "schema_version": 1,
        "probes": [
            {"name": "q1", "verdict": "fail", "evidence": {"prompt": "What is X?", "reference": "Y."}},
            "not a probe",
            {"verdict": "fail", "evidence": "not an object"},
            {"name": "ok", "verdict": "pass", "evidence": {"prompt": "a", "reference": "b"}},
        ],
    }
    path.write_text(json.dumps(minimal))
    report = load_harvest_report(path)
    assert report.ignored == (1,) and [p.name for p in report.probes] == ["q1", "<unnamed>", "ok"]
    plan = plan_harvest(parse_text(FM), report)
    assert [(a.candidate.probe_name, a.candidate.prompt) for a in plan.additions] == [("q1", "What is X?")]
    assert [u.name for u in plan.unharvestable] == ["<unnamed>"]
    for bad, words in [
        ("[]", "a JSON object"),
        ('{"probes": []}', "schema_version"),
        ('{"schema_version": "1", "probes": []}', "schema_version"),
        ('{"schema_version": 2, "probes": []}', "newer"),
        ('{"schema_version": 1}', "probes"),
        ('{"schema_version": 1,\n "probes": [}', "r.json:2: not valid JSON"),
    ]:
        path.write_text(bad)
        with pytest.raises(MalformedReportError, match=words.replace("(", r"\(")):
            load_harvest_report(path)


def test_worst_offenders_are_sealed_whether_or_not_dlm_sway_is_installed() -> None:
    """A failing calibration_drift's items are sway's own (whatever pack this machine has): read as candidates
    and skipped as sealed, with or without reinforce; a passing one's are not even read."""
    offenders = {"worst_offenders": [{"prompt": "An item of some other sway release is", "gold": " sealed"}]}
    passing = ProbeResult("cal", "calibration_drift", Verdict.PASS, 0.9, 0.01, offenders, "")
    plan = plan_harvest(parse_text(FM), report_of(passing))
    assert plan.additions == () and plan.skipped == ()
    for reinforce in (False, True):
        plan = plan_harvest(
            parse_text(FM), report_of(failing("cal", "calibration_drift", **offenders)), reinforce=reinforce
        )
        assert plan.additions == () and plan.unharvestable == ()
        assert [(s.candidate.prompt, s.reason) for s in plan.skipped] == [
            ("An item of some other sway release is", SkipReason.SEALED)
        ]


def test_no_judging_item_is_harvested_from_any_probe() -> None:
    """A failing probe whose pair is an answer_retention pool item or a paraphrase_invariance paraphrase of one of
    the document's questions is sealed; the document's own pairs are not."""
    document = parse_text(FM + "\n::instruction::\n### Q !probe\nList the files.\n\n### A\nls\n")
    report = report_of(
        failing("pool", "probe_recall", prompt="what is the capital of FRANCE", reference="Paris"),
        failing("para", "probe_recall", prompt="Could you explain: List the files?", reference="ls"),
        failing("own", "probe_recall", prompt="List the files.", reference="ls -a"),
    )
    plan = plan_harvest(document, report)
    assert [a.candidate.probe_name for a in plan.additions] == ["own"]
    assert [(s.candidate.probe_name, s.reason, s.detail) for s in plan.skipped] == [
        ("pool", SkipReason.SEALED, "one of answer_retention's pool, which judge every candidate"),
        ("para", SkipReason.SEALED, "one of paraphrase_invariance's paraphrases, which judge every candidate"),
    ]


def test_a_section_in_the_older_learnerd_layout_counts_as_present() -> None:
    older = (
        FM + '\n::instruction::\n<!-- dlm-auto-harvest: source="auto-harvest/a" -->\n### Q !probe\nQ?\n\n### A\nA.\n\n'
        "::instruction::\n### Q\nother\n### A\nx\n"
    )
    plan = plan_harvest(parse_text(older), report_of(failing("a", prompt="Q?", reference="A.")))
    assert plan.additions == () and plan.skipped[0].reason == SkipReason.ALREADY_PRESENT
