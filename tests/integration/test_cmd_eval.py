"""``learnerd eval`` refuses what it cannot evaluate with one line and exit status 1."""

from __future__ import annotations

from pathlib import Path

from learnerd.store.adapters import AdapterStore
from tests.support.evaluation import DLM_ID, commit_version, run_cli

DOC = f"---\ndlm_id: {DLM_ID}\nbase_model: learnerd/tiny-llama\n---\nSome prose.\n"


def test_refusals(tmp_path: Path):
    doc, state = tmp_path / "doc.dlm", tmp_path / "state"
    doc.write_text(DOC)
    no_adapter = run_cli("eval", str(doc), "--state-dir", str(state), check=False)
    assert no_adapter.returncode == 1 and f"{doc}: document '{DLM_ID}' has no adapter yet" in no_adapter.stderr
    no_history = run_cli("eval", str(doc), "--history", "--state-dir", str(state), check=False)
    assert no_history.returncode == 1 and "no evaluated adapter version yet" in no_history.stderr
    commit_version(AdapterStore(state / "adapters"))
    wrong = run_cli("eval", str(doc), "--adapter", "v9", "--state-dir", str(state), check=False)
    assert wrong.returncode == 1 and "no adapter v0009 (versions: v0001)" in wrong.stderr
    doc.write_text("---\ndlm_id: nope\n---\n")
    malformed = run_cli("eval", str(doc), "--state-dir", str(state), check=False)
    assert malformed.returncode == 1 and f"{doc}:2" in malformed.stderr and "dlm_id" in malformed.stderr
    assert run_cli("eval", str(doc), "--null-runs", "99", check=False).returncode == 1
