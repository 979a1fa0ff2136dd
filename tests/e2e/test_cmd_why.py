"""``learnerd why``: the nearest learned examples, the log line each came from, the adapter versions that
trained on it; ``--answer`` with a served response's ``system_fingerprint`` says what that version learned."""

from __future__ import annotations

import json

import pytest

from learnerd.store import db
from tests.support.in_process import run_cli_here
from tests.support.provenance import ThreeVersions

pytestmark = pytest.mark.slow


def test_why_names_the_block_log_line_and_versions_of_the_nearest_example(three_versions: ThreeVersions):
    tv = three_versions
    proc = tv.cli("why", "Which node is each pod scheduled on?", "-k", "1", "--answer", f"{tv.dlm_id}@v0001", "--json")
    answer = json.loads(proc.stdout)
    assert "searching offline" in proc.stderr, "no daemon runs: it says so and searches in this process"
    assert answer["answered_by"] == {
        "doc_key": tv.dlm_id,
        "document": str(tv.document),
        "version": "v0001",
        "has_manifest": True,
        "examples_trained": 2,
    }
    (example,) = answer["examples"]
    assert (example["id"], example["answer"]) == ("nb-k8s-4", "kubectl get pods -o wide -n dev")
    assert example["block"] == {
        "block_id": "nb-k8s-4",
        "file": str(tv.logs / "b.jsonl"),
        "line": 6,
        "time": 1763700117.0,
        "reader": "learnerd",
        "session": None,
    }
    assert example["trained_by"] == [
        {"doc_key": tv.dlm_id, "document": str(tv.document), "versions": ["v0002", "v0003"]}
    ]
    assert example["in_answering_version"] is False, "v0001 was trained before the line was logged"


def test_why_answer_alone_lists_what_that_version_trained_on_even_what_is_forgotten(three_versions: ThreeVersions):
    tv = three_versions
    answer = json.loads(tv.cli("why", "--answer", f"{tv.dlm_id}@v0001", "--json").stdout)
    by_id = {e["id"]: e for e in answer["examples"]}
    assert sorted(by_id) == ["nb-k8s-1", "nb-k8s-2"] and all(e["in_answering_version"] for e in by_id.values())
    assert by_id["nb-k8s-1"]["block"]["file"] == str(tv.logs / "a.jsonl") and by_id["nb-k8s-1"]["block"]["line"] == 3
    assert [t["versions"] for t in by_id["nb-k8s-1"]["trained_by"]] == [["v0001", "v0002", "v0003"]]
    forgotten = by_id["nb-k8s-2"]
    assert forgotten["answer"] is None, "its example was deleted (the command failed when re-run)"
    assert [t["versions"] for t in forgotten["trained_by"]] == [["v0001", "v0002"]]
    text = tv.cli("why", "--answer", f"{tv.dlm_id}@v0001").stdout
    assert f"answered by {tv.document} v0001, trained on 2 learned example(s)" in text
    assert f"block nb-k8s-1: {tv.logs / 'a.jsonl'}:3 · 2025-11-21T04:40:03Z · read as learnerd" in text


@pytest.mark.parametrize(
    ("fingerprint", "status", "needle"),
    [
        ("not-a-fingerprint", 2, "expected a system_fingerprint <dlm_id>@vNNNN"),
        ("01KDOC@base", 1, "the base model answered"),
        ("{dlm_id}@v0009", 1, "no adapter v0009"),
    ],
)
def test_a_fingerprint_it_cannot_use_exits_with_one_line(three_versions: ThreeVersions, fingerprint, status, needle):
    proc = three_versions.cli("why", "--answer", fingerprint.format(dlm_id=three_versions.dlm_id), check=False)
    assert proc.returncode == status and needle in proc.stderr and "Traceback" not in proc.stderr


def test_a_store_not_yet_migrated_is_refused_with_the_fix(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    conn = db.connect(state / "learnerd.db")
    conn.execute("DELETE FROM schema_migrations WHERE name = 'blocks' AND number = 4")  # as before provenance
    conn.close()
    proc = run_cli_here("why", "--answer", "01KDOC@v0001", "--state-dir", str(state), check=False)
    assert proc.returncode == 1 and "lacks blocks 4" in proc.stderr and "learnerd db migrate" in proc.stderr
