"""benchmarks/bench_freshness.py's ``--after``: the fresh tasks are commands the trained state has not logged, and
the daemon runs on a copy of that state whose model cache is linked, never written through."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_freshness import ANSWER_CONFIG, CYCLE_CONFIG, fresh_tasks, logged_blocks, new_root, print_fresh
from benchmarks.bench_learning import choose_nl2bash, write_inputs


def test_fresh_tasks_after_a_trained_state_are_commands_it_never_logged(peer_data: Path, tmp_path: Path) -> None:
    nl2bash = peer_data / "nl2bash" / "paraphrases.jsonl"
    after = tmp_path / "bench"
    blocks, _, _ = choose_nl2bash(nl2bash, 2, seed=7)  # the state logged the first two of the same draw
    write_inputs(after, blocks, "smollm2-135m-instruct", {}, threads=1)
    (after / "state" / "models").mkdir(parents=True)
    (after / "state" / "models" / "base-answers-x.npz").write_bytes(b"cached")
    logged = logged_blocks(after / "logs")
    assert logged == {b.id for b in blocks}
    tasks = fresh_tasks(nl2bash, 3, seed=7, logged=logged)
    drawn, _, _ = choose_nl2bash(nl2bash, 5, seed=7)
    assert [t[0].id for t in tasks] == [b.id for b in drawn[2:]]  # the next of the draw, none it logged
    assert all(paraphrase != block.context[0].text for block, paraphrase, _ in tasks)  # other words than logged

    root = tmp_path / "fresh"
    root.mkdir()
    new_root(root, after)
    assert (root / "docs" / "learned.dlm").read_text() == (after / "docs" / "learned.dlm").read_text()
    assert logged_blocks(root / "logs") == logged
    linked = root / "state" / "models" / "base-answers-x.npz"
    assert linked.is_symlink() and linked.read_bytes() == b"cached"
    assert not (root / "state" / "models").is_symlink()  # what the daemon writes there stays in the copy


def test_the_daemons_configs_are_learnerds_the_answering_one_never_trains(tmp_path: Path) -> None:
    from learnerd.daemon.config import load_config

    answering, cycle = tmp_path / "answer.toml", tmp_path / "cycle.toml"
    answering.write_text(ANSWER_CONFIG.format(base="smollm2-135m-instruct", port=8471))
    cycle.write_text(CYCLE_CONFIG.format(base="smollm2-135m-instruct", threads=2))
    serving, training = load_config(answering), load_config(cycle)
    assert not serving.training.enabled and serving.serve.listen == "127.0.0.1:8471"
    assert training.training.enabled and training.training.num_threads == 2 and training.evaluation.null_runs == 0
    assert serving.state_dir == training.state_dir  # the same state: the cycle trains what the daemon logged


def test_the_exact_answers_are_printed_with_their_confidence_interval(capsys: pytest.CaptureFixture[str]) -> None:
    """9 of 20 exact: Clopper–Pearson's 95 % interval is 23.1 %–68.5 % (scipy.stats.binomtest), printed rounded; the
    wait from each log line to its question is the run's (``--wait``)."""
    row = {"exact": False, "quoted": True, "routed": "base", "adapter": None, "log_to_answer_s": 9.0, "request_s": 4.0}
    rows = [{**row, "exact": i < 9} for i in range(20)]
    print_fresh({"tasks": rows, "ready_s": 9.0, "wait_s": 1.0})
    out = capsys.readouterr().out
    assert "exact 9/20 (45%, 95 % CI 23%–68%)" in out
    assert "its example quoted 20/20" in out
    assert "asked 1 s after their log line" in out and "(the 1 s wait included)" in out  # --wait 1
