"""``learnerd harvest`` on the real audit document and sway report: four runs as a real subprocess
(:func:`harvest_process`: its exit statuses, an argparse refusal and its output as a user sees them), the others
in the test's process (:func:`harvest`, :func:`~tests.support.evaluation.run_cli_in_process`: the same parser and
command, without an interpreter's start of seconds each)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from learnerd.store.dlm import read_document
from tests.conftest import cli_env, learnerd_command
from tests.support.evaluation import run_cli_in_process


def harvest_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        learnerd_command("harvest", *map(str, args)),
        env=cli_env(COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=120,
    )


def harvest(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_cli_in_process("harvest", *map(str, args), check=False)


@pytest.fixture
def audit(peer_copy) -> tuple[Path, Path]:
    folder = peer_copy("dlm/audit")
    return folder / "the-doc.dlm", folder / "sway-results.json"


def test_a_passing_calibration_drift_writes_no_general_knowledge_probes(audit: tuple[Path, Path]) -> None:
    """The real report's cal_general passes but lists its 5 worst trivia items: none goes into the
    Fortran document (as in dlm, only failing probes are harvested)."""
    doc, report = audit
    original = doc.read_bytes()
    result = harvest_process(doc, "--sway-json", report, "--apply", "--json")
    assert result.returncode == 2, result.stderr
    plan = json.loads(result.stdout)
    assert plan["additions"] == [] and not plan["written"] and doc.read_bytes() == original
    assert [u["probe"] for u in plan["unharvestable"]] == ["dk_fortran", "abl_fortran"]
    assert len(plan["undertrained"]) == 34


KIND_QUESTION = "Which Fortran intrinsic gives the kind of a real with 15 significant digits?"
RECALL_FAILS = {
    "name": "recall_kind",
    "kind": "probe_recall",
    "verdict": "fail",
    "evidence": {"prompt": KIND_QUESTION, "reference": "selected_real_kind(15)", "confidence": 1.0},
}


def with_failing_calibration(report: Path) -> Path:
    """A copy of the real report in which cal_general fails (its items are sealed: sway's calibration items judge
    every candidate), and a recall probe of the document's subject fails too."""
    data = json.loads(report.read_text())
    for probe in data["probes"]:
        if probe["name"] == "cal_general":
            probe["verdict"] = "fail"
    data["probes"].append(RECALL_FAILS)
    out = report.with_name("cal-fails.json")
    out.write_text(json.dumps(data))
    return out


def test_dry_run_apply_revert_leaves_the_document_byte_identical(audit: tuple[Path, Path]) -> None:
    doc, real = audit
    report = with_failing_calibration(real)
    original = doc.read_bytes()
    before = [s.section_id for s in read_document(doc).sections]

    dry = harvest_process(doc, "--sway-json", report)
    assert dry.returncode == 0, dry.stderr
    assert doc.read_bytes() == original
    assert "dry-run" in dry.stdout and "evidence.worst_offenders[0]" in dry.stdout and "cal_general" in dry.stdout
    assert "1 to add, 5 skipped" in dry.stdout and dry.stdout.count("sealed") == 5
    assert "79e3ec8ad3461cef" in dry.stdout and "Modern Fortran practitioner notes" in dry.stdout  # undertrained
    assert "dk_fortran (delta_kl)" in dry.stdout  # failing, nothing to harvest
    marker = '<!-- dlm-auto-harvest: source="auto-harvest/recall_kind" -->'
    assert (
        f"::instruction::\n{marker}\n### Q !probe\n{KIND_QUESTION}\n\n### A\nselected_real_kind(15)\ndry-run"
        in dry.stdout
    )

    explicit = harvest(doc, "--sway-json", report, "--dry-run")
    assert explicit.returncode == 0 and explicit.stdout == dry.stdout and doc.read_bytes() == original

    applied = harvest(doc, "--sway-json", report, "--apply")
    assert applied.returncode == 0, applied.stderr
    after = read_document(doc)
    added = after.auto_sections("auto-harvest/")
    assert [s.section_id for s in after.sections][: len(before)] == before  # hand-written sections untouched
    assert [p.question for s in added for p in s.qa_pairs()] == [KIND_QUESTION]
    assert all(s.section_id in dry.stdout for s in added)

    again = harvest(doc, "--sway-json", report, "--apply")  # every candidate is already there
    assert again.returncode == 2 and "already_present" in again.stdout

    reverted = harvest(doc, "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert "stripped 1" in reverted.stdout
    assert doc.read_bytes() == original


def _report_with(report: Path, tmp_path: Path, **changes: object) -> Path:
    data = json.loads(report.read_text())
    data.update(changes)
    out = tmp_path / "changed.json"
    out.write_text(json.dumps(data))
    return out


def test_refusals_and_their_exit_codes(audit: tuple[Path, Path], tmp_path: Path) -> None:
    doc, report = audit
    original = doc.read_bytes()
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"schema_version": 1,\n "probes": [}\n')
    all_pass = json.loads(report.read_text())
    all_pass["probes"] = [p for p in all_pass["probes"] if p["verdict"] == "pass"]
    (tmp_path / "pass.json").write_text(json.dumps(all_pass))
    no_probes = json.loads(report.read_text())
    del no_probes["probes"]
    (tmp_path / "np.json").write_text(json.dumps(no_probes))

    cases = [
        ((doc, "--sway-json", tmp_path / "missing.json"), 1, "cannot read the report"),
        ((doc, "--sway-json", bad_json), 1, "bad.json:2: not valid JSON"),
        ((doc, "--sway-json", tmp_path / "np.json"), 1, "probes: missing"),
        ((doc, "--sway-json", _report_with(report, tmp_path, schema_version=2)), 1, "schema_version"),
        ((doc, "--revert", "--sway-json", report), 1, "--revert cannot be combined"),
        ((doc, "--revert", "--apply"), 1, "--revert cannot be combined"),
        ((doc,), 1, "--sway-json REPORT is required"),
        ((doc, "--sway-json", report, "--strict"), 1, "dk_fortran (delta_kl), abl_fortran (adapter_ablation)"),
        ((doc, "--sway-json", report, "--strict", "--apply"), 1, "without a reference"),
        ((tmp_path / "nodoc.dlm", "--sway-json", report, "--apply"), 1, "No such file"),
    ]
    for args, code, words in cases:
        result = harvest(*args)
        assert (result.returncode, words in result.stderr) == (code, True), (args, result.stderr)
        assert doc.read_bytes() == original, args

    none = harvest(doc, "--sway-json", tmp_path / "pass.json", "--apply")
    assert none.returncode == 2 and "no candidates to harvest" in none.stdout
    low = harvest_process(doc, "--sway-json", report, "--min-confidence", "1.5")
    assert low.returncode == 2 and "[0, 1]" in low.stderr  # argparse refuses a value outside [0, 1]
    assert doc.read_bytes() == original


def test_malformed_document_is_refused_with_its_line(audit: tuple[Path, Path]) -> None:
    doc, report = audit
    doc.write_text(doc.read_text().replace("::instruction::", "::instructions::", 1))
    result = harvest_process(doc, "--sway-json", report, "--apply")
    assert result.returncode == 1 and f"{doc}:70: unknown section fence" in result.stderr


def test_config_gives_the_tag_and_min_confidence(audit: tuple[Path, Path], tmp_path: Path) -> None:
    doc, real = audit
    report = with_failing_calibration(real)
    config = tmp_path / "learnerd.toml"
    config.write_text('[evaluation]\nharvest_tag = "nightly"\n')
    applied = harvest(doc, "--sway-json", report, "--apply", "--config", config, "--json")
    assert applied.returncode == 0, applied.stderr
    assert {s.harvest_source for s in read_document(doc).auto_sections()} == {"nightly/recall_kind"}
    assert len(json.loads(applied.stdout)["additions"]) == 1
    config.write_text("[evaluation]\nmin_confidence = 0.9\n")
    weak = tmp_path / "weak.json"
    weak.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "probes": [
                    {
                        "name": "w",
                        "verdict": "fail",
                        "evidence": {
                            "prompt": "Which compiler flag checks bounds?",
                            "reference": "-fcheck=bounds",
                            "confidence": 0.5,
                        },
                    }
                ],
            }
        )
    )
    below = harvest(doc, "--sway-json", weak, "--config", config, "--json")
    assert below.returncode == 2 and json.loads(below.stdout)["skipped"][0]["reason"] == "below_confidence"
    flag = harvest(doc, "--sway-json", weak, "--config", config, "--min-confidence", "0.5", "--json")
    assert flag.returncode == 0 and [a["probe"] for a in json.loads(flag.stdout)["additions"]] == ["w"]
