"""benchmarks/bench_learning.py version 2 on the peer data: the sets it measures are what learnerd learns (and
never trains the paraphrases), ``--training`` reaches the document or is refused before anything runs, and
its smoke size runs the whole loop on the built-in tiny model (real ``learnerd run --once`` cycles)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from benchmarks import bench_learning
from benchmarks.bench_learning import PROBES, choose_sets, probe_cells, suggested, training_overrides, write_inputs
from learnerd.store.dlm import read_document
from learnerd.store.dlm.qa import question_text
from learnerd.store.dlm.training import TrainingConfigError
from tests.conftest import REPO_ROOT, cli_env

SCRIPT = REPO_ROOT / "benchmarks" / "bench_learning.py"

Bench = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def bench(capsys, monkeypatch) -> Bench:
    """``bench(*args)``: the bench's ``main()`` with ``args``, run in this process (torch and transformers already
    imported here; each cycle's ``learnerd run --once`` is a subprocess all the same), as a completed process: its
    exit status, stdout and stderr. The SIGTERM handler and torch's thread count it sets are undone afterwards."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
        capsys.readouterr()
        handler, threads = signal.getsignal(signal.SIGTERM), torch.get_num_threads()
        message = ""
        try:
            code = bench_learning.main()
        except SystemExit as exc:  # argparse, a refused --resume, a failed cycle
            code, message = (exc.code, "") if isinstance(exc.code, int) else (1, str(exc.code))
        finally:
            signal.signal(signal.SIGTERM, handler)
            torch.set_num_threads(threads)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([str(SCRIPT), *args], code, out, err + message)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return run


def test_an_answer_is_scored_on_the_command_it_suggests_the_fenced_block_when_it_has_one() -> None:
    """Quoted examples come in fenced blocks, and a model answers in kind: the command is the block's body
    (as learnerd records a served answer's suggestion), not the answer's first characters."""
    fenced = "```bash\nfind . -name '*.foo'   -exec cat {} \\;\n```\n\nThis prints every file that matches."
    assert suggested(fenced) == "find . -name '*.foo' -exec cat {} \\;"
    assert suggested("  ls   -la \n") == "ls -la"
    assert suggested("Use `ls` to list files.") == "Use `ls` to list files."


def test_the_retention_cell_says_how_many_the_adapter_still_knows_where_the_report_splits_the_lost() -> None:
    evidence = {"base_right": 65, "kept": 60, "lost_wording": 4, "lost_knowledge": 1}
    split = {"answer_retention": {"verdict": "fail", "raw": 60 / 65, "evidence": evidence}}
    older = {"answer_retention": {"verdict": "fail", "raw": 60 / 65, "evidence": {"base_right": 65, "kept": 60}}}
    assert probe_cells(split)[1] == "60/65 (knows 64) fail"
    served = {
        "answer_retention": {
            "verdict": "pass",
            "raw": 1.0,
            "evidence": evidence | {"kept": 65, "adapter_alone": {"kept": 52}},
        }
    }
    assert probe_cells(served)[1] == "65/65 (alone 52; knows 64) pass"
    assert probe_cells(older)[1] == "60/65 fail"  # a report from before the split
    recall = {"probe_recall": {"verdict": "fail", "raw": 0.95, "evidence": {"exact": 95, "probes": 100}}}
    assert probe_cells(recall) == ["95/100 fail", "-", "-", "-"]


def test_the_learned_set_is_nl2bash_first_descriptions_and_tldr_first_examples_the_paraphrases_the_others(
    peer_data: Path,
) -> None:
    sets = choose_sets(peer_data / "tldr", peer_data / "nl2bash" / "paraphrases.jsonl", pairs=5, seed=3)
    learned, paraphrase, related = (sets.items[k] for k in ("learned", "paraphrase", "related"))
    nl2bash = [it for it in learned if it.source.startswith("nl2bash/")]
    assert len(nl2bash) == 5 and len(learned) == 10 and len(related) == 5
    assert [b.id for b in sets.blocks] == [it.source for it in learned]
    rows = (peer_data / "nl2bash" / "paraphrases.jsonl").read_text(encoding="utf-8").splitlines()
    for item in nl2bash:
        entry = json.loads(rows[int(item.source.split("/")[1]) - 1])
        assert item.prompt == question_text(entry["descriptions"][0]) and item.command == entry["command"]
        asked = [p.prompt for p in paraphrase if p.source.startswith(item.source + "/")]
        assert asked and set(asked) <= {question_text(d) for d in entry["descriptions"][1:]}
    assert not {p.prompt for p in paraphrase} & {it.prompt for it in learned}
    assert {p.command for p in paraphrase} == {it.command for it in nl2bash}
    for first, second in zip(learned[5:], related, strict=True):
        assert first.source.rsplit("/", 1)[0] == second.source.rsplit("/", 1)[0]
        assert first.source.endswith("/0") and second.source.endswith("/1")


def test_training_overrides_are_read_as_json_and_land_in_the_documents_frontmatter(peer_data, tmp_path) -> None:
    training = training_overrides(
        ["learning_rate=5e-4", "lora_r=4", "lr_scheduler=linear", 'target_modules=["q_proj"]']
    )
    assert training == {"learning_rate": 5e-4, "lora_r": 4, "lr_scheduler": "linear", "target_modules": ["q_proj"]}
    sets = choose_sets(peer_data / "tldr", peer_data / "nl2bash" / "paraphrases.jsonl", pairs=1)
    config = write_inputs(tmp_path, sets.blocks, "learnerd/tiny-llama", training, threads=1)
    document = read_document(tmp_path / "docs" / "learned.dlm")
    assert document.frontmatter.training.learning_rate == 5e-4 and document.frontmatter.training.lora_r == 4
    assert config.is_file() and len((tmp_path / "logs" / "pairs.jsonl").read_text().splitlines()) == 2 * 2


@pytest.mark.parametrize(
    ("argument", "says"),
    [("lora_r=0", "lora_r"), ("learning_rat=1e-3", "does not know: learning_rat"), ("lora_r", "KEY=VALUE")],
)
def test_a_training_override_learnerd_refuses_is_refused(argument: str, says: str) -> None:
    with pytest.raises(TrainingConfigError, match=says):
        training_overrides([argument])


def test_a_refused_training_override_exits_2_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--training", "lora_r=0", "--out", str(out)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "--training" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_a_resume_from_a_missing_or_another_runs_json_exits_2(peer_data, tmp_path: Path, bench: Bench) -> None:
    """``--resume`` reads the checkpoint before anything runs: none there, or one from another seed, is refused
    with the reason, and nothing is written."""
    out, results = tmp_path / "run", tmp_path / "learning.json"
    command = ["--smoke", "--out", str(out), "--json", str(results), "--resume"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return bench(*command, *extra)

    missing = run()
    assert missing.returncode == 2 and "cannot read the run to resume" in missing.stderr
    sets = choose_sets(peer_data / "tldr", peer_data / "nl2bash" / "paraphrases.jsonl", pairs=2, seed=0)
    recorded = {"base": "learnerd/tiny-llama", "pairs": 2, "seed": 0, "training": {}, "sets": {}}
    recorded["sets"] = {k: [vars(it) for it in v] for k, v in sets.items.items()}
    results.write_text(json.dumps(recorded), encoding="utf-8")
    other_seed = run("--seed", "1")
    assert other_seed.returncode == 2 and "recorded with another seed" in other_seed.stderr
    incomplete = run()
    assert incomplete.returncode == 2 and "not a bench_learning result" in incomplete.stderr
    assert "Traceback" not in missing.stderr + other_seed.stderr + incomplete.stderr and not out.exists()


@pytest.mark.slow
def test_the_smoke_size_trains_evaluates_and_reports_every_condition_and_resumes_a_cycle_later(
    peer_data, tmp_path: Path, bench: Bench
) -> None:
    """One cycle, then ``--resume`` to the smoke size's two: the second run goes on from the first's checkpoint
    (the base's answers and cycle 1 reused, not measured again) and ends as a two-cycle run does."""
    png, results = tmp_path / "learning.png", tmp_path / "learning.json"
    command = ["--smoke", "--pairs", "1", "--threads", "1", "--out", str(tmp_path / "run")]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        done = bench(*command, "--png", str(png), "--json", str(results), *extra)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    first_run = run("--cycles", "1")
    first = json.loads(results.read_text())
    assert list(first["conditions"]) == ["base", "base+RAG", "adapter c1 (v0001)", "adapter+RAG", "served (v0001)"]
    assert first["measured"] == {"adapter c1 (v0001)": 1} and "base answered" in first_run.stdout
    relayed = first_run.stdout  # the cycle's log, relayed while it runs
    assert "training step" in relayed and "training: v0001 committed" in relayed
    assert "evaluating v0001" in relayed and "gate: v0001 promoted" in relayed
    resumed = run("--resume")
    assert "base answered" not in resumed.stdout
    assert png.read_bytes().startswith(b"\x89PNG")
    data = json.loads(results.read_text())
    conditions = data["conditions"]
    assert list(conditions)[:-1] == ["base", "base+RAG", "adapter c1 (v0001)", "adapter c2 (v0001)", "adapter+RAG"]
    assert {k: conditions[k] for k in ("base", "base+RAG")} == {k: first["conditions"][k] for k in ("base", "base+RAG")}
    assert data["cycles"][0] == first["cycles"][0] and len(data["cycles"]) == 2
    (first_cycle,), second = (cycle["committed"] for cycle in data["cycles"])
    assert second == [] and first_cycle["probes"] == data["probes"]["adapter c1 (v0001)"]
    assert first_cycle["resumed_at_step"] == 0  # trained from its first step: no checkpoint to go on from
    assert {k: first_cycle[k] for k in ("version", "outcome", "reasons")} == {
        "version": "v0001",
        "outcome": "promoted",
        "reasons": [],
    }
    learned = len(data["sets"]["learned"])
    assert conditions["adapter c1 (v0001)"]["learned"]["exact"] > conditions["base"]["learned"]["exact"]
    assert all(len(by_set[s]["answers"]) == len(data["sets"][s]) for by_set in conditions.values() for s in by_set)
    assert learned == 2 and set(data["probes"]["adapter c1 (v0001)"]) == {
        "probe_recall",
        "answer_retention",
        "calibration_drift",
        "multi_turn_coherence_decay",
    }
    assert "cycle 2:" in resumed.stdout and "adapter+RAG" in resumed.stdout
    reach = data["retrieval"]  # a learned prompt is its own example's query: retrieved first
    assert reach["learned"] == {"first": learned, "among": learned}
    assert all(0 <= r["first"] <= r["among"] <= len(data["sets"][s]) for s, r in reach.items())
    assert "in the 3 examples retrieved for it: learned 2/2 first" in resumed.stdout
    served = conditions["served (v0001)"]  # as the endpoint serves: a learned prompt is a question v0001 learned
    assert served["learned"]["routed"] == ["adapter"] * learned
    assert all(len(served[s]["routed"]) == len(data["sets"][s]) for s in served)
    assert data["probes"]["served (v0001)"] == data["probes"]["adapter c1 (v0001)"]


@pytest.mark.slow
def test_probes_only_reads_each_versions_evaluation_and_a_resume_without_it_answers_the_sets(
    peer_data, tmp_path: Path, bench: Bench
) -> None:
    """``--probes-only``: the cycle runs and its version's evaluation is read (the document's probes summed beside
    the retention probes), but no set is answered; resumed without it, the run answers the sets with the base, base
    + RAG and the version it read, training nothing; a full run resumed with ``--probes-only`` is refused."""
    results = tmp_path / "learning.json"
    command = ["--smoke", "--pairs", "1", "--cycles", "1", "--threads", "1"]
    command += ["--out", str(tmp_path / "run"), "--png", str(tmp_path / "learning.png"), "--json", str(results)]
    done = bench(*command, "--probes-only")
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(results.read_text())
    assert data["conditions"] == {} and data["probes_only"] is True and "base answered" not in done.stdout
    assert (tmp_path / "learning.png").read_bytes().startswith(b"\x89PNG")  # the evaluations' panel alone
    (cycle,) = data["cycles"]
    (version,) = cycle["committed"]
    read = data["probes"]["adapter c1 (v0001)"]
    assert read == version["probes"] and set(read) == set(PROBES)
    recall = read["probe_recall"]["evidence"]  # a probe per learned pair (the harvest comes after the evaluation)
    assert recall["probes"] == len(data["sets"]["learned"]) and 0 <= recall["exact"] <= recall["probes"]
    assert f"{recall['exact']}/{recall['probes']}" in done.stdout and "gate: v0001" in done.stdout
    as_full_run = bench(*command, "--resume")
    assert as_full_run.returncode == 0, as_full_run.stderr[-3000:]
    assert "training step" not in as_full_run.stdout and "adapter c1 (v0001) answered" in as_full_run.stdout
    full = json.loads(results.read_text())
    assert list(full["conditions"]) == ["base", "base+RAG", "adapter c1 (v0001)", "adapter+RAG", "served (v0001)"]
    assert full["cycles"] == data["cycles"] and full["probes_only"] is False
    served = full["probes"].pop("served (v0001)")  # the served version's evaluation, read again for its row
    assert full["probes"] == data["probes"] and served == data["probes"]["adapter c1 (v0001)"]
    answered = full["conditions"]["adapter c1 (v0001)"]
    assert all(len(answered[s]["answers"]) == len(full["sets"][s]) for s in full["sets"])
    assert answered["learned"]["exact"] > full["conditions"]["base"]["learned"]["exact"]
    as_probes_only = bench(*command, "--resume", "--probes-only")
    assert as_probes_only.returncode == 2 and "recorded with another probes_only" in as_probes_only.stderr


@pytest.mark.slow
def test_a_bench_stopped_mid_cycle_stops_its_learnerd_run_and_resumes_with_the_candidate_it_trained(
    peer_data, tmp_path: Path, bench: Bench
) -> None:
    """SIGTERM to the bench while its first cycle evaluates the version it trained: the bench exits 143 only once
    its ``learnerd run --once`` has exited (no daemon left running alone). ``--resume`` then goes on from the
    base's answers, and its cycle 1 evaluates that candidate instead of training it again."""
    out, results = tmp_path / "run", tmp_path / "r.json"
    command = [sys.executable, str(SCRIPT), "--smoke", "--pairs", "1", "--cycles", "1", "--threads", "1"]
    command += ["--out", str(out), "--png", str(tmp_path / "p.png"), "--json", str(results)]
    env = cli_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as stopped:
        assert stopped.stdout is not None
        seen = []
        for line in stopped.stdout:  # relayed from the cycle's log while its learnerd run evaluates
            seen.append(line)
            if "evaluating v0001" in line:
                break
        assert any("evaluating v0001" in line for line in seen), "".join(seen)[-3000:]
        assert _learnerd_runs(out / "learnerd.toml"), "no learnerd run --once while the bench's cycle runs"
        stopped.terminate()
        rest = stopped.stdout.read()
        assert stopped.wait(timeout=300) == 143, rest[-3000:]
    assert not _learnerd_runs(out / "learnerd.toml")
    assert json.loads(results.read_text())["cycles"] == []  # the base's answers were kept

    resumed = bench(*command[2:], "--resume")  # in this process: the stop was the subprocess's subject
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "base answered" not in resumed.stdout and "v0001 was trained before the run stopped" in resumed.stdout
    (cycle,) = json.loads(results.read_text())["cycles"]
    assert cycle["continued"] == "v0001" and [c["version"] for c in cycle["committed"]] == ["v0001"]
    assert "training step" not in resumed.stdout  # evaluated and decided, not trained again


def _learnerd_runs(config: Path) -> list[int]:
    """Process ids of live ``learnerd run`` processes reading ``config`` (from ``/proc``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"learnerd" in argv and b"run" in argv and str(config).encode() in argv and state != "Z":
            found.append(int(proc.name))
    return found
