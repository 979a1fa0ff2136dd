"""The closed loop in ``learnerd run --once``: the probes reconciler writes ``learned.dlm`` from the example
logs (with the built-in model's training recipe written out), then — after the pipeline has drained — its
adapter is trained once and answers at least 18 of its 20 probes exactly (the base none); a second run
trains nothing. (CPU training with fixed seeds is deterministic: two fresh state directories train the
same adapter, to the bit of its final loss, so the count does not vary between runs.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.training.recipes import RANDOM_BASE_RECIPE
from tests.conftest import REPO_ROOT
from tests.support.pipeline import run_once


@pytest.mark.slow
def test_run_once_trains_the_learned_document_once(tmp_path: Path, models_dir: Path):
    logs = tmp_path / "logs"
    shutil.copytree(REPO_ROOT / "examples" / "logs", logs)
    state = tmp_path / "state"
    state.mkdir()
    (state / "models").symlink_to(models_dir)
    config = tmp_path / "learnerd.toml"  # the calibration and the divergence probes are not the subject: quickest
    config.write_text("[evaluation]\nnull_runs = 0\nmax_prompts = 1\n")
    first = run_once(state, logs, "--config", str(config), train=True)
    document = read_document(state / "docs" / "learned.dlm")
    assert document.frontmatter.base_model == "learnerd/tiny-llama"  # the default: trainable offline
    assert document.frontmatter.raw["training"] == RANDOM_BASE_RECIPE  # written out, not implied
    assert first["changes"]["training"] == {"adapters_committed": 1}
    current = AdapterStore(state / "adapters").current(document.frontmatter.dlm_id)
    meta = current.metadata()
    assert current.name == "v0001" and meta.section_ids == tuple(s.section_id for s in document.sections)
    assert len(document.auto_sections("learnerd/")) == first["examples"] == 20
    assert meta.final_loss < meta.start_loss
    recall = first["recall"][str(state / "docs" / "learned.dlm")]
    assert recall["version"] == "v0001" and recall["probes"] == 20
    assert recall["before"] == 0 and recall["after"] >= 18, recall
    assert recall["after"] <= recall["passed"] <= recall["probes"], "an exact answer passes its probe"

    second = run_once(state, logs, "--config", str(config), train=True)
    assert second["changes"]["training"] == {} and second["controllers"]["training"]["failures"] == 0
    assert [v.name for v in AdapterStore(state / "adapters").list_versions(document.frontmatter.dlm_id)] == ["v0001"]
