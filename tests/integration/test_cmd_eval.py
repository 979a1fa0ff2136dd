"""``learnerd eval`` refuses what it cannot evaluate with one line and exit status 1; its CI gates, its JSON
on stdout and its JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from learnerd.store.adapters import AdapterStore
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import DLM_ID, commit_version, qa_document, run_cli_in_process, state_with_models
from tests.support.evaluation import run_cli as run_cli_subprocess
from tests.support.training import train_document

DOC = f"---\ndlm_id: {DLM_ID}\nbase_model: learnerd/tiny-llama\n---\nSome prose.\n"


def test_refusals(tmp_path: Path):
    doc, state = tmp_path / "doc.dlm", tmp_path / "state"
    doc.write_text(DOC)
    no_adapter = run_cli_in_process("eval", str(doc), "--state-dir", str(state), check=False)
    assert no_adapter.returncode == 1 and f"{doc}: document '{DLM_ID}' has no adapter yet" in no_adapter.stderr
    no_history = run_cli_in_process("eval", str(doc), "--history", "--state-dir", str(state), check=False)
    assert no_history.returncode == 1 and "no evaluated adapter version yet" in no_history.stderr
    commit_version(AdapterStore(state / "adapters"))
    wrong = run_cli_in_process("eval", str(doc), "--adapter", "v9", "--state-dir", str(state), check=False)
    assert wrong.returncode == 1 and "no adapter v0009 (versions: v0001)" in wrong.stderr
    doc.write_text("---\ndlm_id: nope\n---\n")
    malformed = run_cli_in_process("eval", str(doc), "--state-dir", str(state), check=False)
    assert malformed.returncode == 1 and f"{doc}:2" in malformed.stderr and "dlm_id" in malformed.stderr
    assert run_cli_in_process("eval", str(doc), "--null-runs", "99", check=False).returncode == 1


@pytest.fixture(scope="module")
def trained(tmp_path_factory, models_dir):
    """Four probes trained a few steps: an adapter that answers some of them wrongly."""
    tmp = tmp_path_factory.mktemp("gates")
    state = state_with_models(tmp, models_dir)
    doc = tmp / "qa.dlm"
    doc.write_text(qa_document(QA_PAIRS[:4], epochs=1, per_section=2))
    anyio.run(train_document, AdapterStore(state / "adapters"), doc, models_dir)
    return SimpleNamespace(doc=doc, state=state)


@pytest.mark.usefixtures("one_torch_thread")
def test_gates_json_on_stdout_output_and_junit(trained, tmp_path):
    out, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    common = ("--state-dir", str(trained.state), "--null-runs", "2", "--log-level", "warning")
    gated = run_cli_subprocess(  # a process's stdout: the report and nothing else, not even a library's own write
        "eval", str(trained.doc), "--json", "--output", str(out), "--junit", str(junit),
        "--fail-under", "0.99", "--require-pass", *common, check=False,
    )  # fmt: skip
    assert gated.returncode == 1, gated.stderr
    report = json.loads(gated.stdout)  # stdout is the report and nothing else
    assert report == json.loads(out.read_text()) and report["schema_version"] == 1
    failed = [p["name"] for p in report["probes"] if p["verdict"] in ("fail", "error")]
    assert f"gate failed: overall score {report['score']['overall']:.3f} < 0.99" in gated.stderr
    assert f"gate failed: {len(failed)} probe(s) failed or errored: {failed[0]}" in gated.stderr
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == str(len(report["probes"])) and suite.get("failures") == str(
        sum(p["verdict"] == "fail" for p in report["probes"])
    )
    retention = {"paraphrase_invariance", "calibration_drift", "answer_retention"}
    assert retention <= {p["kind"] for p in report["probes"]} and "calibration" in report["score"]["components"]
    assert retention <= {case.get("classname") for case in suite.iter("testcase")}
    passing = run_cli_in_process("eval", str(trained.doc), "--fail-under", "0", *common)
    assert f"overall score {report['score']['overall']:.3f}, {report['score']['band']} (" in passing.stdout
    assert all(kind in passing.stdout for kind in retention)
    history = run_cli_in_process("eval", str(trained.doc), "--history", "--json", "--state-dir", str(trained.state))
    (point,) = json.loads(history.stdout)
    assert point["name"] == "v0001" and point["band"] == report["score"]["band"]


@pytest.mark.usefixtures("one_torch_thread")
def test_calibration_sway_exact_reaches_the_probes_and_the_report(trained):
    common = ("--state-dir", str(trained.state), "--null-runs", "2", "--log-level", "warning", "--json")
    report = json.loads(run_cli_in_process("eval", str(trained.doc), "--calibration", "sway-exact", *common).stdout)
    (null,) = [p for p in report["probes"] if p["kind"] == "null_adapter"]
    assert null["evidence"]["calibration"] == "sway-exact" and "delta_kl" in null["evidence"]["calibrated_kinds"]
    bad = run_cli_in_process("eval", str(trained.doc), "--calibration", "exact", *common, check=False)
    assert bad.returncode == 2 and "invalid choice: 'exact'" in bad.stderr
