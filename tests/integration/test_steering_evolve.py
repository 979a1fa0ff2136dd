"""The evolution loop in-process on the built-in tiny model: a stopped and resumed run equals an
uninterrupted one, a run directory is never taken over by a run with other parameters, and a failing
reflector leaves the finished iterations on disk."""

from __future__ import annotations

import json
import threading

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.steering.clusters import eos_token_ids, load_or_build_clusters
from learnerd.steering.evolve import EvolutionError, EvolutionSettings, SteeredModel, run_evolution
from learnerd.steering.judges import MatchJudge
from learnerd.steering.pool import PoolItem
from learnerd.steering.processor import load_steering
from learnerd.steering.reflectors import OfflineReflector, ReflectorError
from tests.qa_pairs import QA_PAIRS
from tests.support.steering import one_thread

POOL = [PoolItem(q, a, f"pair {i}") for i, (q, a) in enumerate(QA_PAIRS[:6])]
SETTINGS = EvolutionSettings(iterations=4, minibatch_size=2, max_new_tokens=6, delta_bound=3.0)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tiny_model_dir, minilm, tmp_path_factory):
    model, tokenizer = load_model_directory(tiny_model_dir)
    cache = tmp_path_factory.mktemp("clusters")

    def clusters(k: int):
        with one_thread():
            return load_or_build_clusters(
                tokenizer,
                embedder_name=minilm.name,
                make_embedder=lambda: minilm,
                k=k,
                seed=0,
                eos_ids=eos_token_ids(tokenizer, model.generation_config),
                cache_root=cache,
            )

    return SteeredModel(model, tokenizer, max_new_tokens=6), clusters


def _evolve(tiny, run_dir, k=4, settings=SETTINGS, **kwargs):
    model, clusters = tiny
    return run_evolution(
        run_dir,
        model=model,
        clusters=clusters(k),
        pool=POOL,
        judge=MatchJudge(),
        reflector=kwargs.pop("reflector", OfflineReflector(step=1.0, seed=3)),
        settings=settings,
        **kwargs,
    )


def _without_times(history):
    return [{k: v for k, v in h.items() if k not in ("seconds", "finished_at")} for h in history]


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(tiny, tmp_path):
    straight = _evolve(tiny, tmp_path / "straight")
    assert straight.status == "finished" and len(straight.history) == 4

    stop = threading.Event()

    def stop_inside_iteration_2(iteration, done, total):
        if iteration == 2 and done == 1:
            stop.set()

    interrupted = _evolve(tiny, tmp_path / "resumed", stop=stop, on_answer=stop_inside_iteration_2)
    assert interrupted.status == "stopped" and len(interrupted.history) == 2  # iteration 2 was dropped
    assert not (tmp_path / "resumed" / "reflector_message_002.txt").exists()
    resumed = _evolve(tiny, tmp_path / "resumed")
    assert resumed.status == "finished"
    assert _without_times(resumed.history) == _without_times(straight.history)
    best = {p: json.loads((tmp_path / p / "deltas_best.json").read_text()) for p in ("straight", "resumed")}
    assert best["straight"] == best["resumed"]
    load_steering(tmp_path / "resumed" / "deltas_best.json", tiny[0].tokenizer)


def test_a_run_with_other_parameters_is_refused_and_changes_nothing(tiny, tmp_path):
    run_dir = tmp_path / "run"
    _evolve(tiny, run_dir, settings=EvolutionSettings(iterations=1, minibatch_size=2, max_new_tokens=6))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    with pytest.raises(EvolutionError, match=r"other parameters \(clusters_sha256: .*k: 4 → 3"):
        _evolve(tiny, run_dir, k=3, settings=EvolutionSettings(iterations=2, minibatch_size=2, max_new_tokens=6))
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    load_steering(run_dir / "deltas_best.json", tiny[0].tokenizer)  # its cluster map is intact


def test_a_failing_reflector_keeps_the_finished_iterations(tiny, tmp_path):
    class FailsSecondTime(OfflineReflector):
        calls = 0

        def reflect(self, request, messages):
            FailsSecondTime.calls += 1
            if FailsSecondTime.calls == 2:
                raise ReflectorError("endpoint down")
            return super().reflect(request, messages)

    run_dir = tmp_path / "run"
    with pytest.raises(ReflectorError, match="endpoint down"):
        _evolve(tiny, run_dir, reflector=FailsSecondTime())
    history = json.loads((run_dir / "history.json").read_text())["iterations"]
    assert len(history) == 1 and (run_dir / "deltas_best.json").exists()
    assert (run_dir / "reflector_message_001.txt").exists()  # the message was written before the call
    resumed = _evolve(tiny, run_dir)
    assert resumed.status == "finished" and resumed.history[0] == history[0]


def test_cluster_bounds_hold_in_every_iteration_and_in_the_run_file(tiny, tmp_path):
    """``cluster_bounds = {0: [1, 3]}``: iteration 0 starts at the bound nearest zero (1.0), every
    evaluated and proposed delta of cluster 0 stays in [1, 3], and the bounds are a run parameter."""
    bounded = EvolutionSettings(iterations=3, minibatch_size=2, max_new_tokens=6, cluster_bounds={0: (1.0, 3.0)})
    outcome = _evolve(tiny, tmp_path / "run", settings=bounded, reflector=OfflineReflector(step=5.0, seed=3))
    assert outcome.history[0]["deltas"]["0"] == 1.0
    for entry in outcome.history:
        assert 1.0 <= entry["deltas"]["0"] <= 3.0 and 1.0 <= entry["proposed"]["0"] <= 3.0
        assert all(-10.0 <= v <= 10.0 for v in entry["proposed"].values())
    assert json.loads((tmp_path / "run" / "run.json").read_text())["cluster_bounds"] == {"0": [1.0, 3.0]}
    with pytest.raises(EvolutionError, match=r"cluster_bounds names cluster id\(s\) \[99\]"):
        _evolve(tiny, tmp_path / "other", settings=EvolutionSettings(iterations=1, cluster_bounds={99: (0.0, 1.0)}))
