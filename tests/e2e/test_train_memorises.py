"""Issue 4's acceptance test through the document path: ``learnerd train DOC`` on a .dlm document of 20
Q/A pairs (the built-in tiny model) yields an adapter that reproduces at least 18 answers exactly under
greedy decoding — and the base without it none; a second run has nothing to train."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.generate import greedy_answer
from learnerd.ml.loader import load_adapter
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.evaluation import QUICK_EVALUATION
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_cli


def exact_answers(model, tokenizer, pairs) -> int:
    return sum(greedy_answer(model, tokenizer, q, max_new_tokens=len(a.encode()) + 8) == a for q, a in pairs)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_one_cycle_of_learnerd_train_memorises_the_document(tmp_path: Path, models_dir: Path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "models").symlink_to(models_dir)
    # dlm's own keys; the tiny model knows nothing, so it needs far more than dlm's 2e-4 and 3 epochs
    doc = qa_document(tmp_path / "qa.dlm", QA_PAIRS, training={"learning_rate": 1e-2, "num_epochs": 40})
    config = tmp_path / "config.toml"
    config.write_text(QUICK_EVALUATION)  # the subject is what training learned, not the evaluation after it
    args = ("train", str(doc), "--state-dir", str(state), "--config", str(config), "--threads", "1", "--json")
    outcome = json.loads(run_cli(*args).stdout)
    assert outcome["outcome"] == "committed" and outcome["version"] == "v0001" and outcome["rows"] == 20
    assert outcome["final_loss"] < outcome["start_loss"] / 10 and outcome["new_sections"] == 1

    version = AdapterStore(state / "adapters").current(read_document(doc).frontmatter.dlm_id)
    assert version is not None and str(version.path) == outcome["adapter_path"]
    model, tokenizer = load_model_directory(resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir).path)
    peft_model = load_adapter(model, version)
    assert exact_answers(peft_model, tokenizer, QA_PAIRS) >= 18
    with peft_model.disable_adapter():
        assert exact_answers(peft_model, tokenizer, QA_PAIRS) == 0

    again = run_cli_here(
        "train", str(doc), "--state-dir", str(state), "--config", str(config), check=False
    )  # no import
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to train: the rows are unchanged since v0001")
