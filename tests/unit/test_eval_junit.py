"""A report as JUnit XML, in sway 0.1.0's layout (compared with sway's own ``to_junit`` where installed)."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from learnerd.eval.junit import to_junit, write_junit
from learnerd.eval.report import ProbeResult, Report, Score, Verdict

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PROBES = (
    ProbeResult("null_baseline", "null_adapter", Verdict.PASS, 1.0, None, {}, "calibrated", duration_s=1.25),
    ProbeResult("recall_1", "probe_recall", Verdict.FAIL, 0.2, 0.2, {}, 'answered "x" & <y>', duration_s=0.5),
    ProbeResult("delta_kl", "delta_kl", Verdict.ERROR, None, None, {}, "boom", duration_s=0.1),
    ProbeResult("multi_turn", "multi_turn_coherence_decay", Verdict.SKIP, None, None, {}, "no chat template"),
)
REPORT = Report(
    sway_version="0.1.0", base_model_id="b", adapter_id="a", started_at=NOW, finished_at=NOW, wall_seconds=3.14159,
    score=Score(0.4242, "partial", {"adherence": 0.5, "baseline": 1.0}), probes=PROBES,
)  # fmt: skip


def test_junit_counts_verdicts_and_escapes_messages(tmp_path):
    path = tmp_path / "junit.xml"
    write_junit(path, REPORT)
    suite = ET.parse(path).getroot()
    assert suite.tag == "testsuite" and suite.attrib == {
        "name": "sway", "tests": "4", "failures": "1", "errors": "1", "skipped": "1", "time": "3.142",
    }  # fmt: skip
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {
        "overall": "0.4242",
        "band": "partial",
        "component.adherence": "0.5000",
        "component.baseline": "1.0000",
    }
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name"), c.get("time")) for c in cases][:2] == [
        ("null_adapter", "null_baseline", "1.250"), ("probe_recall", "recall_1", "0.500"),
    ]  # fmt: skip
    assert [[child.tag for child in c] for c in cases] == [[], ["failure"], ["error"], ["skipped"]]
    assert cases[1].find("failure").get("message") == 'answered "x" & <y>'


def test_junit_is_sways():
    pytest.importorskip("dlm_sway", reason="dlm-sway 0.1.0 is not installed (pip install dlm-sway==0.1.0)")
    from dlm_sway.core.result import ProbeResult as SwayProbe
    from dlm_sway.core.result import SuiteResult, SwayScore
    from dlm_sway.core.result import Verdict as SwayVerdict
    from dlm_sway.suite.report import to_junit as sway_junit

    probes = [
        SwayProbe(name=p.name, kind=p.kind, verdict=SwayVerdict(p.verdict.value), score=p.score, message=p.message,
                  duration_s=p.duration_s)
        for p in PROBES
    ]  # fmt: skip
    suite = SuiteResult(
        spec_path="s", started_at=NOW, finished_at=NOW + dt.timedelta(seconds=REPORT.wall_seconds),
        base_model_id="b", adapter_id="a", sway_version="0.1.0", probes=tuple(probes),
    )  # fmt: skip
    score = SwayScore(overall=0.4242, components={"adherence": 0.5, "baseline": 1.0}, weights={}, band="partial")
    assert to_junit(REPORT) == sway_junit(suite, score)
