"""The sway report model against a real sway report."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from learnerd.eval.report import (
    ProbeResult,
    Report,
    ReportError,
    Score,
    Verdict,
    dump_report,
    load_report,
    parse_report,
    report_to_dict,
    write_report,
)


@pytest.fixture
def real(peer_data: Path) -> dict:
    return json.loads((peer_data / "dlm/audit/sway-results.json").read_text())


def test_real_report_loads(peer_data: Path) -> None:
    report = load_report(peer_data / "dlm/audit/sway-results.json")
    assert report.schema_version == 1 and report.sway_version == "0.1.0"
    assert report.base_model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert report.started_at == datetime(2026, 4, 29, 20, 36, 38, 876695, tzinfo=UTC)
    assert report.wall_seconds == pytest.approx(83.544246) and report.score.band == "partial"
    assert [(p.name, p.verdict) for p in report.probes][:3] == [
        ("null_baseline", Verdict.PASS),
        ("dk_fortran", Verdict.FAIL),
        ("sis_fortran", Verdict.FAIL),
    ]
    para = next(p for p in report.probes if p.kind == "paraphrase_invariance")
    assert para.verdict == Verdict.ERROR and para.score is None and para.evidence == {}
    assert report.probes[1].ci_95 == pytest.approx((0.13243605721975274, 0.16676766505398383))


def test_dump_then_load_is_the_same_report_and_keeps_every_key(real: dict, tmp_path: Path) -> None:
    report = parse_report(json.dumps(real))
    assert report_to_dict(report) == real  # every key of the real report, unknown ones included
    write_report(tmp_path / "r.json", report)
    again = load_report(tmp_path / "r.json")
    assert again == report
    assert (tmp_path / "r.json").read_text() == dump_report(report)


def test_a_new_report_written_by_learnerd_loads_back(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    report = Report(
        sway_version="learnerd-0.1.0",
        base_model_id="tiny-llama",
        adapter_id="v0003",
        started_at=t0,
        finished_at=t0,
        wall_seconds=1.5,
        score=Score(overall=0.7, band="healthy"),
        probes=(
            ProbeResult("kl", "delta_kl", Verdict.FAIL, 0.2, float("nan"), {"prompt": "p", "reference": "r"}, "m"),
        ),
    )
    write_report(tmp_path / "n.json", report)
    loaded = load_report(tmp_path / "n.json")
    assert loaded.probes[0].raw is None  # non-finite numbers are written as null, as sway does
    assert loaded.probes[0].evidence == {"prompt": "p", "reference": "r"} and loaded.adapter_id == "v0003"


def _mutate(real: dict, path: list, value: object = None, delete: bool = False) -> str:
    data = json.loads(json.dumps(real))
    target = data
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(data, indent=2)


@pytest.mark.parametrize(
    ("path", "value", "delete", "field", "words"),
    [
        (["sway_version"], None, True, "sway_version", "missing"),
        (["probes"], {}, False, "probes", "array"),
        (["probes", 2, "verdict"], "meh", False, "probes[2].verdict", "pass/fail/warn/skip/error"),
        (["probes", 1, "evidence"], [], False, "probes[1].evidence", "object"),
        (["probes", 3, "message"], None, True, "probes[3].message", "missing"),
        (["probes", 0, "score"], "high", False, "probes[0].score", "number"),
        (["probes", 1, "name"], "null_baseline", False, "probes[1].name", "not unique"),
        (["schema_version"], 2, False, "schema_version", "newer"),
        (["started_at"], "yesterday", False, "started_at", "ISO-8601"),
        (["score", "overall"], None, True, "score.overall", "missing"),
        (["wall_seconds"], True, False, "wall_seconds", "number"),
    ],
)
def test_malformed_reports_name_the_field(
    real: dict, path: list, value: object, delete: bool, field: str, words: str
) -> None:
    with pytest.raises(ReportError) as err:
        parse_report(_mutate(real, path, value, delete), source="r.json")
    assert err.value.field == field and words in err.value.message
    assert str(err.value).startswith(f"r.json: {field}: ")


def test_json_syntax_errors_name_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{\n  "schema_version": 1,\n  "probes": [,]\n}\n')
    with pytest.raises(ReportError) as err:
        load_report(tmp_path / "bad.json")
    assert err.value.line == 3 and str(err.value).startswith(f"{tmp_path / 'bad.json'}:3: ")
    with pytest.raises(ReportError, match="cannot read"):
        load_report(tmp_path / "missing.json")
    with pytest.raises(ReportError, match="must be an object"):
        parse_report("[1, 2]")
