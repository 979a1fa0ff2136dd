"""``learnerd forget --match "kubectl get pods -n dev"`` on the quick-start state (examples/logs, the built-in
tiny model), offline, as a user runs it: the example, its vector, its probe section and its foyle export file
are gone; the next ``learnerd run --once`` trains the document from scratch on the sections left; running
again does not bring the example back; ``learnerd search`` no longer finds it, nor ``learnerd why`` names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from learnerd.ml.base_model import DEFAULT_BASE_MODEL
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import new_document, read_document
from tests.conftest import REPO_ROOT
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_once, table_rows

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

COMMAND = "kubectl get pods -n dev"


def test_forget_takes_an_example_back_and_the_document_retrains_fresh(tmp_path: Path, models_dir: Path):
    logs, state, export = tmp_path / "logs", tmp_path / "state", tmp_path / "foyle"
    shutil.copytree(REPO_ROOT / "examples" / "logs", logs)
    state.mkdir()
    (state / "models").symlink_to(models_dir)
    config = tmp_path / "learnerd.toml"
    # the gate's evaluation after each training is not the subject: its quickest form
    config.write_text(f'[export.foyle]\ndir = "{export}"\n\n[evaluation]\nnull_runs = 0\nmax_prompts = 1\n')
    document_path = state / "docs" / "learned.dlm"
    # the document as the pipeline creates it, but trained for 2 epochs, not the built-in recipe's 60: how well the
    # adapter learns is not the subject, that a version is trained (fresh) after the forget is
    document_path.parent.mkdir()
    document_path.write_bytes(new_document(DEFAULT_BASE_MODEL, training={"num_epochs": 2}).to_bytes())
    first = run_once(state, logs, "--config", str(config), train=True)
    assert first["changes"]["training"] == {"adapters_committed": 1}
    (forgotten,) = table_rows(state, f"SELECT id FROM examples WHERE answer = '{COMMAND}'")
    assert (export / f"{forgotten[0]}.example.binpb").exists() and COMMAND in document_path.read_text()

    proc = run_cli_here(
        "forget", "--match", COMMAND, "--yes", "--json", "--config", str(config), "--state-dir", str(state)
    )
    report = json.loads(proc.stdout)
    assert [e["id"] for e in report["examples"]] == [forgotten[0]] and report["vectors"] == 1
    assert report["documents"] == {str(document_path): 1} and report["retrain"] == [str(document_path)]
    assert table_rows(state, f"SELECT id FROM examples WHERE id = '{forgotten[0]}'") == []
    assert table_rows(state, f"SELECT example_id FROM embeddings WHERE example_id = '{forgotten[0]}'") == []
    assert COMMAND not in document_path.read_text()
    assert not (export / f"{forgotten[0]}.example.binpb").exists()

    second = run_once(state, logs, "--config", str(config), train=True, here=True)  # the first: a subprocess
    assert second["changes"]["training"] == {"adapters_committed": 1}, "the document retrains"
    document = read_document(document_path)
    meta = AdapterStore(state / "adapters").current(document.frontmatter.dlm_id).metadata()
    assert meta.version == 2 and meta.parent_version is None, "from scratch, not resumed from v0001"
    assert meta.section_ids == tuple(s.section_id for s in document.sections)
    assert second["examples"] == first["examples"] - 1 and COMMAND not in document_path.read_text()

    third = run_once(state, logs, "--config", str(config), train=True, here=True)
    assert third["examples"] == second["examples"] and third["changes"]["training"] == {}
    assert COMMAND not in document_path.read_text() and not (export / f"{forgotten[0]}.example.binpb").exists()
    common = ["--json", "--config", str(config), "--state-dir", str(state), "list the pods in dev"]
    hits = json.loads(run_cli_here("search", *common).stdout)
    assert forgotten[0] not in [h["id"] for h in hits] and all(h["answer"] != COMMAND for h in hits)
    why = json.loads(run_cli_here("why", *common).stdout)
    assert why["examples"] and forgotten[0] not in [e["id"] for e in why["examples"]], "why no longer names it"
