"""``learnerd evolve`` end to end on the built-in tiny model with an adapter trained on a Q/A document:
ten iterations with the offline reflector, the files they leave, SIGINT mid-run and a resumed run, the
best deltas applied, and ``learnerd generate --steering``. ``evolve`` runs as a subprocess where a signal is
the subject (SIGINT mid-run); its other runs and ``generate`` (a subprocess in
``tests/integration/test_cmd_generate.py``) run in the test's process
(:func:`~tests.support.in_process.run_cli_here`)."""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from learnerd.steering.processor import read_steering
from tests.conftest import cli_env, learnerd_command
from tests.support.in_process import run_cli_here
from tests.support.memorised import memorised
from tests.support.steering import one_thread

pytestmark = pytest.mark.slow
EVOLVE = ("--minibatch-size", "4", "--max-new-tokens", "32", "--log-level", "warning")


IN_PROCESS = pytest.mark.usefixtures("one_torch_thread")
"""For a test that runs the command in this process (:func:`~tests.support.in_process.run_cli_here`, no
subprocess's imports): torch on one thread as the subprocesses (``OMP_NUM_THREADS=1``)."""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A copy of the trained state and document, and a first 10-iteration run in ``run_dir``."""
    trained = memorised()
    root = tmp_path_factory.mktemp("evolve")
    shutil.copytree(trained.state_dir, root / "state")
    doc = root / "qa.dlm"
    shutil.copy(trained.doc, doc)
    state = root / "state"
    run_dir = state / "steering" / "runs" / trained.doc_key  # the default run directory
    started = time.monotonic()
    with one_thread():
        result = run_cli_here("evolve", str(doc), "--state-dir", str(state), "--iterations", "10", *EVOLVE, check=False)
    return SimpleNamespace(
        doc=doc, state=state, run_dir=run_dir, result=result, seconds=time.monotonic() - started, key=trained.doc_key
    )


def _history(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text(encoding="utf-8"))["iterations"]


def test_ten_offline_iterations_leave_best_deltas_history_and_plot(workspace):
    assert workspace.result.returncode == 0, workspace.result.stderr
    run_dir = workspace.run_dir
    history = _history(run_dir)
    assert [h["iteration"] for h in history] == list(range(10))
    assert history[0]["deltas"] == {str(c): 0.0 for c in range(12)}  # iteration 0 is the unsteered model
    for h in history:
        assert h["composite"] == pytest.approx(0.4 * h["shortness"] + 0.6 * h["correctness"])
        assert h["shortness"] == pytest.approx(1 / (1 + h["mean_len"] / 100))
        assert h["mean_len"] == pytest.approx(sum(r["tokens"] for r in h["responses"]) / 4)
        assert h["reflector"] == "offline" and h["summary"] and len(h["responses"]) == 4
    for before, after in itertools.pairwise(history):
        assert after["deltas"] == before["proposed"]  # each iteration evaluates the reflector's proposal

    best = read_steering(run_dir / "deltas_best.json")
    composites = [h["composite"] for h in history]
    assert best.evaluation["composite"] >= history[0]["composite"]
    assert best.evaluation["composite"] == max(composites)
    assert best.evaluation["iteration"] == composites.index(max(composites))
    assert {str(c): v for c, v in best.deltas.items()} == history[best.evaluation["iteration"]]["deltas"]
    assert read_steering(run_dir / "deltas_current.json").deltas == {
        int(c): v for c, v in history[-1]["proposed"].items()
    }
    assert sorted(p.name for p in run_dir.glob("reflector_message_*.txt")) == [
        f"reflector_message_{i:03d}.txt" for i in range(10)
    ]
    assert "## Responses (4)" in (run_dir / "reflector_message_009.txt").read_text()
    png = (run_dir / "evolution.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert not list(run_dir.glob(".*.tmp"))
    run = json.loads((run_dir / "run.json").read_text())
    assert run["k"] == 10 and run["pool_size"] == 20 and run["adapter"] == "v0001" and run["reflector"] == "offline"
    assert "best: iteration" in workspace.result.stderr


@pytest.mark.usefixtures("one_torch_thread")
def test_the_recorded_best_composite_is_reproduced_by_its_deltas(workspace):
    """Regenerate the best iteration's minibatch with deltas_best.json: the same answers, the same score."""
    from transformers import LogitsProcessorList

    from learnerd.ml.base_model import load_base
    from learnerd.ml.generate import greedy_reply
    from learnerd.ml.loader import load_adapter
    from learnerd.steering.evolve import score
    from learnerd.steering.judges import MatchJudge
    from learnerd.steering.processor import load_steering
    from learnerd.store.adapters import AdapterStore

    base = load_base("learnerd/tiny-llama", cache_dir=workspace.state / "models")
    model = load_adapter(base.model, AdapterStore(workspace.state / "adapters").current(workspace.key))
    best = read_steering(workspace.run_dir / "deltas_best.json")
    entry = _history(workspace.run_dir)[best.evaluation["iteration"]]
    processors = LogitsProcessorList([load_steering(workspace.run_dir / "deltas_best.json", base.tokenizer)])
    replies = [
        greedy_reply(model, base.tokenizer, r["question"], max_new_tokens=32, logits_processor=processors)
        for r in entry["responses"]
    ]
    assert [r.text for r in replies] == [r["response"] for r in entry["responses"]]
    judge = MatchJudge()
    verdicts = [
        judge.judge(r["question"], r["reference"], reply.text)
        for r, reply in zip(entry["responses"], replies, strict=True)
    ]
    again = score([len(r.token_ids) for r in replies], [v.correct for v in verdicts], 100.0)
    assert again.composite == pytest.approx(best.evaluation["composite"])


@IN_PROCESS
def test_sigint_mid_run_keeps_the_best_deltas_and_a_resumed_run_continues(workspace, tmp_path):
    run_dir = tmp_path / "run"
    args = ("evolve", str(workspace.doc), "--state-dir", str(workspace.state), "--run-dir", str(run_dir), *EVOLVE)
    process = subprocess.Popen(
        learnerd_command(*args, "--iterations", "500"),
        env=cli_env(OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if (run_dir / "history.json").exists() and len(_history(run_dir)) >= 2:
                break
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()[1]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "SIGINT: stopping" in stderr and "run the same command again" in stderr
    history = _history(run_dir)
    done = len(history)
    assert 2 <= done < 500
    best = read_steering(run_dir / "deltas_best.json")
    assert best.evaluation["composite"] == max(h["composite"] for h in history)
    assert not list(run_dir.glob(".*.tmp"))

    resumed = run_cli_here(*args, "--iterations", str(done + 2), "--json", check=False)  # the SIGINT's: a subprocess
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout)  # --json: stdout is the outcome alone
    assert (outcome["status"], outcome["iterations"], outcome["run_dir"]) == ("finished", done + 2, str(run_dir))
    after = _history(run_dir)
    assert len(after) == done + 2 and after[:done] == history
    assert after[done]["deltas"] == history[-1]["proposed"]
    assert read_steering(run_dir / "deltas_best.json").evaluation["composite"] == max(h["composite"] for h in after)

    changed = run_cli_here(*args, "--iterations", str(done + 3), "--scale", "50", check=False)
    assert changed.returncode == 1 and "holds a run with other parameters (scale: 100.0 → 50.0)" in changed.stderr
    assert len(_history(run_dir)) == done + 2


@IN_PROCESS
def test_apply_best_answers_the_pool_steered_and_unsteered(workspace):
    result = run_cli_here(
        "evolve",
        str(workspace.doc),
        "--state-dir",
        str(workspace.state),
        "--apply-best",
        "--json",
        *EVOLVE,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    applied = json.loads((workspace.run_dir / "apply_best.json").read_text())
    assert json.loads(result.stdout) == applied  # --json: the same object on stdout, the table on stderr
    assert applied["steering"] == str(workspace.run_dir / "deltas_best.json")
    for label in ("steered", "unsteered"):
        answers = applied[label]["answers"]
        assert len(answers) == 20
        assert applied[label]["correctness"] == sum(a["correct"] for a in answers) / 20
    assert applied["unsteered"]["correctness"] >= 0.9  # the adapter's answers
    assert "steered: composite" in result.stderr and "unsteered: composite" in result.stderr


@IN_PROCESS
def test_generate_with_and_without_steering(workspace, tmp_path):
    common = ("generate", str(workspace.doc), "What is the capital of France?", "--state-dir", str(workspace.state))
    plain = run_cli_here(*common, check=False)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "Paris\n"
    as_json = run_cli_here(*common, "--json", check=False)
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert (answer["text"], answer["adapter"], answer["steering"]) == ("Paris", "v0001", None)
    assert answer["tokens"] >= 1 and answer["base_model_identity"]
    best = workspace.run_dir / "deltas_best.json"
    ended = tmp_path / "end_at_once.json"
    raw = json.loads(best.read_text())
    raw["deltas"] = {c: (10.0 if c == "0" else 0.0) for c in raw["deltas"]}
    raw["clusters"]["path"] = str(workspace.run_dir / raw["clusters"]["path"])
    ended.write_text(json.dumps(raw))
    steered = run_cli_here(*common, "--steering", str(ended), check=False)
    assert steered.returncode == 0 and steered.stdout == "\n"  # a large EOS delta: the empty answer
    raw["tokenizer_identity"] = "vocab-999-0000000000000000"
    other = tmp_path / "other_tokenizer.json"
    other.write_text(json.dumps(raw))
    refused = run_cli_here(*common, "--steering", str(other), check=False)
    assert refused.returncode == 1
    assert "made for tokenizer vocab-999-0000000000000000, but this model's tokenizer is vocab-262-" in refused.stderr
    assert "Traceback" not in refused.stderr


@IN_PROCESS
def test_bad_pool_and_flags_are_refused_before_any_model_loads(tmp_path):
    from tests.support.steering import document_text

    doc = tmp_path / "qa.dlm"
    doc.write_text(document_text(), encoding="utf-8")
    pool = tmp_path / "fb.jsonl"
    pool.write_text('{"question": "Revenue in 2022?", "answer": "$1,577.00"}\n{"question": oops}\n', encoding="utf-8")
    state = ("--state-dir", str(tmp_path / "state"))
    bad = run_cli_here("evolve", str(doc), "--pool", str(pool), *state, check=False)
    assert bad.returncode == 1 and f"{pool}:2: not JSON" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "state" / "models").exists()
    flag = run_cli_here("evolve", str(doc), "--steering", str(pool), *state, check=False)
    assert flag.returncode == 2 and "--steering PATH goes with --apply-best" in flag.stderr
    scale = run_cli_here("evolve", str(doc), "--scale", "0", *state, check=False)
    assert scale.returncode == 2 and "scale" in scale.stderr
