"""Privacy end to end, as a user runs it: a logged cell holding an AWS key pair and a ``curl -u
user:password`` URL is learned with typed placeholders and the secrets are nowhere on disk (state directory,
documents, foyle export); a dangerous command that succeeded is kept as a block, counted as refused by
policy, and is in no document; ``learnerd db scrub`` takes the same secrets out of state stored without
redaction. ``run --once`` (in the first test) and ``db scrub`` (in the second) run once each as a subprocess, the
other commands in the test's process (:func:`~tests.support.in_process.run_cli_here`; ``search`` is a subprocess in
``tests/e2e/test_fleet.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_cli, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

KEY_ID = "AKIAZ7EXAMPLE4Q2W3E5"
SECRET = "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"
PASSWORD = "Tr0ub4dor-and-3"
COMMAND = (
    f"export AWS_ACCESS_KEY_ID={KEY_ID} AWS_SECRET_ACCESS_KEY={SECRET} && "
    f"curl -u reporter:{PASSWORD} https://reports.example.com/q3.csv -o q3.csv"
)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_secrets_are_redacted_before_storage_and_dangerous_commands_never_learned(tmp_path: Path) -> None:
    logs, state, docs, export = tmp_path / "logs", tmp_path / "state", tmp_path / "docs", tmp_path / "foyle"
    logs.mkdir()
    lines = "".join(
        event_line("context", block, 1_700_000_000.0, cells=[Cell("markup", text)])
        + event_line("executed", block, 1_700_000_001.0, cell=Cell("code", command, "bash"), exit_code=0)
        for block, text, command in [
            ("b-report", "Download the Q3 report with the reporting account", COMMAND),
            ("b-clean", "Clean up the temp build files", "rm -rf ~"),
            ("b-pods", "List the pods in the dev namespace", "kubectl get pods -n dev"),
        ]
    )
    (logs / "session.jsonl").write_text(lines)
    config = tmp_path / "learnerd.toml"
    config.write_text(f'state_dir = "state"\ndocs_dirs = ["docs"]\n[export.foyle]\ndir = "{export}"\n')
    summary = json.loads(
        run_cli("run", "--once", "--json", "--no-train", "--config", str(config), "--log-dir", str(logs)).stdout
    )

    assert summary["examples"] == 2 and summary["blocks"] == 3
    assert summary["analyzer"]["redactions"] == {
        "AWS_ACCESS_KEY_ID": 1,
        "AWS_SECRET_ACCESS_KEY": 1,
        "BASIC_AUTH_PASSWORD": 1,
    }
    assert summary["refused_by_policy"] == {
        "refused by policy: recursive deletion or overwrite of home, root or a device": 1
    }
    for root in (state, docs, export):
        for secret in (KEY_ID, SECRET, PASSWORD):
            assert files_holding(root, secret.encode()) == [], f"{secret} is stored under {root}"
    assert table_rows(state, "SELECT executed FROM blocks WHERE id = 'b-clean'") == [("rm -rf ~",)]
    assert "rm -rf" not in (docs / "learned.dlm").read_text()

    hits = json.loads(
        run_cli_here("search", "--json", "--config", str(config), "download the quarterly report", "-k", "1").stdout
    )
    assert hits[0]["answer"] == (
        "export AWS_ACCESS_KEY_ID=<AWS_ACCESS_KEY_ID> AWS_SECRET_ACCESS_KEY=<AWS_SECRET_ACCESS_KEY> && "
        "curl -u reporter:<BASIC_AUTH_PASSWORD> https://reports.example.com/q3.csv -o q3.csv"
    )


def test_db_scrub_redacts_secrets_stored_before_redaction_everywhere(tmp_path: Path) -> None:
    logs, state, docs, export = tmp_path / "logs", tmp_path / "state", tmp_path / "docs", tmp_path / "foyle"
    logs.mkdir()
    (logs / "session.jsonl").write_text(
        event_line("context", "b-report", 1_700_000_000.0, cells=[Cell("markup", "Download the Q3 report")])
        + event_line("executed", "b-report", 1_700_000_001.0, cell=Cell("code", COMMAND, "bash"), exit_code=0)
    )
    settings = f'state_dir = "state"\ndocs_dirs = ["docs"]\n[export.foyle]\ndir = "{export}"\n'
    before, after = tmp_path / "before.toml", tmp_path / "learnerd.toml"
    before.write_text(settings + "[privacy]\nallow = ['.*']\n")  # as if stored before redaction existed
    after.write_text(settings)
    run_cli_here("run", "--once", "--json", "--no-train", "--config", str(before), "--log-dir", str(logs))
    assert files_holding(state, SECRET.encode()) and files_holding(docs, SECRET.encode())

    dry = json.loads(run_cli_here("db", "scrub", "--dry-run", "--json", "--config", str(after)).stdout)
    assert dry["tables"] == {"blocks": 1, "examples": 1, "foyle_traces": 0, "suggestions": 0}
    assert files_holding(docs, SECRET.encode())
    report = json.loads(run_cli("db", "scrub", "--json", "--config", str(after)).stdout)
    # each secret was in the block, the example and the document's section
    assert report["redacted"] == {"AWS_ACCESS_KEY_ID": 3, "AWS_SECRET_ACCESS_KEY": 3, "BASIC_AUTH_PASSWORD": 3}
    assert report["vectors"] == 0 and report["export_files"] == 1 and list(report["documents"].values()) == [1]
    run_cli_here("run", "--once", "--json", "--no-train", "--config", str(after), "--log-dir", str(logs))
    for root in (state, docs, export):
        for secret in (KEY_ID, SECRET, PASSWORD):
            assert files_holding(root, secret.encode()) == [], f"{secret} is still stored under {root}"
    hits = json.loads(run_cli_here("search", "--json", "--config", str(after), "the Q3 report", "-k", "1").stdout)
    assert "<AWS_SECRET_ACCESS_KEY>" in hits[0]["answer"] and "<BASIC_AUTH_PASSWORD>" in hits[0]["answer"]
