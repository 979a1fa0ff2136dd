"""The steering package's pure parts: the cluster rules, delta validation, the judge, scores, the pool,
minibatch sampling and the offline and CMA-ES reflectors."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from learnerd.steering.clusters import ClusterError, eos_token_ids, is_number_token
from learnerd.steering.evolve import minibatch, score
from learnerd.steering.judges import MatchJudge, normalise
from learnerd.steering.pool import PoolError, read_pool_jsonl
from learnerd.steering.processor import SteeringError, validate_deltas
from learnerd.steering.reflectors import (
    CMAReflector,
    OfflineReflector,
    ReflectionRequest,
    Scores,
    Trial,
    parse_reflection,
    reflection_schema,
)

IDS = (0, 1, 2, 3)


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "7",
        " 42",
        "##5",
        "3.14",
        "1,000",
        "$",
        "%",
        "+",
        "-",
        "*",
        "/",
        "=",
        ".",
        ",",
        "...",
        "²",
        "½",
        "٣",
        "€",
        "×",
        " -1",
    ],
)
def test_number_tokens(text):
    assert is_number_token(text)


@pytest.mark.parametrize("text", ["", " ", "\n", "3rd", "mp3", "(", ")", "x", "the", "##ing", "�", "<|eot_id|>", "#"])
def test_not_number_tokens(text):
    assert not is_number_token(text)


def test_eos_ids_union_of_tokenizer_and_generation_config():
    tok = SimpleNamespace(eos_token_id=257, sep_token_id=None)
    assert eos_token_ids(tok, SimpleNamespace(eos_token_id=[257, 258])) == (257, 258)
    assert eos_token_ids(tok, SimpleNamespace(eos_token_id=300)) == (257, 300)
    assert eos_token_ids(tok) == (257,)


def test_eos_ids_fall_back_to_sep_for_an_encoder_tokenizer():
    assert eos_token_ids(SimpleNamespace(eos_token_id=None, sep_token_id=102)) == (102,)
    with pytest.raises(ClusterError, match="no EOS"):
        eos_token_ids(SimpleNamespace(eos_token_id=None, sep_token_id=None))


def test_validate_deltas_accepts_exactly_the_ids_as_finite_numbers():
    assert validate_deltas({"0": 1, "1": -0.5, "2": 0.0, "3": 2.5}, IDS, bound=3) == {0: 1.0, 1: -0.5, 2: 0.0, 3: 2.5}
    assert validate_deltas({3: 0, 2: 0, 1: 0, 0: 0}, IDS) == dict.fromkeys(IDS, 0.0)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"0": 0, "1": 0, "2": 0}, r"missing cluster id\(s\) \[3\]"),
        ({"0": 0, "1": 0, "2": 0, "3": 0, "4": 0}, r"unknown cluster id\(s\) \[4\]"),
        ({"0": 0, "1": 0, "2": 0, "3": "1.5"}, "cluster 3's value '1.5' is not a finite number"),
        ({"0": 0, "1": 0, "2": True, "3": 0}, "cluster 2's value True"),
        ({"0": 0, "1": math.nan, "2": 0, "3": 0}, "cluster 1's value nan"),
        ({"0": 0, "1": math.inf, "2": 0, "3": 0}, "cluster 1's value inf"),
        ({"0": 11, "1": 0, "2": 0, "3": 0}, r"outside \[-10, 10\]"),
        ({"x": 0}, "'x' is not a cluster id"),
        ({"01": 0, "1": 0, "2": 0, "3": 0}, "canonical"),
        ([0, 0, 0, 0], "object keyed by cluster id"),
    ],
)
def test_validate_deltas_refuses(raw, match):
    with pytest.raises(SteeringError, match=match):
        validate_deltas(raw, IDS, bound=10)


def test_validate_deltas_with_per_cluster_bounds():
    bounds = {0: (0.0, 4.0), 1: (-1.0, 1.0), 2: (-1.0, 1.0), 3: (-1.0, 1.0)}
    assert validate_deltas({"0": 4, "1": -1, "2": 0, "3": 1}, IDS, bounds)[0] == 4.0
    with pytest.raises(SteeringError, match=r"cluster 0's value -0.5 is outside \[0.0, 4.0\]"):
        validate_deltas({"0": -0.5, "1": 0, "2": 0, "3": 0}, IDS, bounds)


def test_reflection_schema_names_every_cluster_id_as_required():
    schema = reflection_schema(IDS)
    deltas = schema["properties"]["deltas"]
    assert deltas["required"] == ["0", "1", "2", "3"] and set(deltas["properties"]) == {"0", "1", "2", "3"}
    assert deltas["additionalProperties"] is False and schema["additionalProperties"] is False
    assert schema["required"] == ["deltas", "summary"]


def test_parse_reflection():
    ok = parse_reflection({"deltas": dict.fromkeys("0123", 1.0), "summary": " shorter "}, IDS, 5.0)
    assert ok.deltas == dict.fromkeys(IDS, 1.0) and ok.summary == "shorter"
    with pytest.raises(SteeringError, match="exactly the keys"):
        parse_reflection({"deltas": dict.fromkeys("0123", 1.0)}, IDS, 5.0)
    with pytest.raises(SteeringError, match="summary must be a string"):
        parse_reflection({"deltas": dict.fromkeys("0123", 1.0), "summary": 3}, IDS, 5.0)


@pytest.mark.parametrize(
    ("reference", "response", "correct", "why"),
    [
        ("Paris", "Paris", True, "matches"),
        ("Paris", "paris.", True, "matches"),
        ("The Pacific", "pacific", True, "matches"),
        ("Paris", "It is Paris, the capital.", True, "contains"),
        ("William Shakespeare", "Shakespeare", False, "does not contain"),
        ("Paris", "", False, "empty"),
        ("Paris", " ... ", False, "empty"),
        ("1989", "It fell in 1989.", True, "contains"),
        ("1989", "1990", False, "lacks"),
        ("$1,577.00", "about 1580 dollars", True, "every number"),
        ("$1,577.00", "1,700", False, "lacks"),
        ("24.26%", "24.3 percent", True, "every number"),
        ("100 degrees", "100 °C", True, "every number"),
    ],
)
def test_match_judge(reference, response, correct, why):
    verdict = MatchJudge(numeric_tolerance=0.01).judge("q", reference, response)
    assert verdict.correct is correct and why in verdict.explanation


def test_normalise_is_squad_like():
    assert normalise("The  Lion's share, a CAT!") == ["lion", "s", "share", "cat"]


def test_scores_follow_the_issue_formula():
    s = score([10, 30], [True, False], scale=20.0)
    assert s.mean_len == 20 and s.correctness == 0.5 and s.shortness == 0.5
    assert s.composite == pytest.approx(0.4 * 0.5 + 0.6 * 0.5)
    assert score([0], [True], scale=100.0).composite == pytest.approx(1.0)


def test_minibatch_is_seeded_per_iteration_and_without_replacement():
    a = minibatch(20, 4, seed=0, iteration=3)
    assert a == minibatch(20, 4, seed=0, iteration=3) and len(set(a)) == 4 and all(0 <= i < 20 for i in a)
    assert len({tuple(minibatch(20, 4, seed=0, iteration=i)) for i in range(10)}) > 1
    assert sorted(minibatch(3, 8, seed=0, iteration=0)) == [0, 1, 2]


def test_read_pool_jsonl(tmp_path):
    path = tmp_path / "pool.jsonl"
    rows = [{"question": "Q1?", "answer": "A1", "evidence": "ignored"}, {"question": "Q2?", "answer": 42}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    items = read_pool_jsonl(path)
    assert [(i.question, i.answer, i.source) for i in items] == [
        ("Q1?", "A1", "pool.jsonl:1"),
        ("Q2?", "42", "pool.jsonl:2"),
    ]


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"question": "q", "answer": "a"}', "{not json"], r"pool.jsonl:2: not JSON"),
        (['{"question": "q", "answer": "a"}', "", '{"question": "q"}'], r"pool.jsonl:3: \"answer\""),
        (['{"question": "", "answer": "a"}'], r"pool.jsonl:1: \"question\""),
        (["[1, 2]"], r"pool.jsonl:1: expected an object"),
        ([""], "no rows"),
    ],
)
def test_read_pool_jsonl_refuses_with_the_line_number(tmp_path, lines, match):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(PoolError, match=match):
        read_pool_jsonl(path)


def _request(trials, bound=5.0):
    return ReflectionRequest(
        iteration=len(trials) - 1,
        deltas=trials[-1].deltas,
        responses=(),
        scores=Scores(1.0, 1.0, 0.5, trials[-1].composite),
        cluster_descriptions={},
        summary="",
        trials=tuple(trials),
        cluster_ids=IDS,
        bounds=dict.fromkeys(IDS, (-bound, bound)),
        scale=100.0,
    )


def test_offline_reflector_is_a_pure_seeded_function_of_the_trials():
    zero = dict.fromkeys(IDS, 0.0)
    trials = [Trial(zero, 0.5)]
    a = OfflineReflector(step=1.0, seed=7).reflect(_request(trials), [])
    assert a == OfflineReflector(step=1.0, seed=7).reflect(_request(trials), [])
    assert a.deltas != OfflineReflector(step=1.0, seed=8).reflect(_request(trials), []).deltas
    assert set(a.deltas) == set(IDS) and a.deltas != zero and "baseline" in a.summary


def test_offline_reflector_moves_to_a_better_trial_and_stays_in_bounds():
    zero = dict.fromkeys(IDS, 0.0)
    far = dict.fromkeys(IDS, 4.0)
    reflector = OfflineReflector(step=0.01, seed=0)
    better = reflector.reflect(_request([Trial(zero, 0.5), Trial(far, 0.9)]), [])
    worse = reflector.reflect(_request([Trial(zero, 0.5), Trial(far, 0.1)]), [])
    assert all(abs(better.deltas[c] - 4.0) < 0.2 for c in IDS) and "accepted" in better.summary
    assert all(abs(worse.deltas[c]) < 0.2 for c in IDS) and "rejected" in worse.summary
    huge = OfflineReflector(step=100.0, seed=0).reflect(_request([Trial(zero, 0.5)], bound=2.0), [])
    assert all(abs(v) <= 2.0 for v in huge.deltas.values())


@pytest.mark.parametrize("make", [lambda: OfflineReflector(step=3.0, seed=1), lambda: CMAReflector(step=3.0, seed=1)])
def test_reflectors_keep_each_cluster_within_its_own_bounds(make):
    """``cluster_bounds = {0: [0, 6]}`` (EOS only up): over 30 proposals cluster 0 never goes negative,
    the others stay within [-2, 2], and cluster 0 uses its wider range."""
    request = _request([Trial(dict.fromkeys(IDS, 0.0), 0.5)])
    bounds = {0: (0.0, 6.0), **{c: (-2.0, 2.0) for c in IDS[1:]}}
    trials, seen = [Trial(dict.fromkeys(IDS, 0.0), 0.5)], []
    for k in range(30):
        request = dataclasses.replace(_request(trials), bounds=bounds)
        deltas = make().reflect(request, []).deltas
        assert 0.0 <= deltas[0] <= 6.0 and all(-2.0 <= deltas[c] <= 2.0 for c in IDS[1:])
        seen.append(deltas[0])
        trials.append(Trial(deltas, 0.5 + 0.1 * deltas[0] - 0.01 * k))
    assert max(seen) > 2.0


def test_cma_reflector_is_a_pure_seeded_function_of_the_trials_and_leaves_numpy_alone():
    zero = dict.fromkeys(IDS, 0.0)
    trials = [Trial(zero, 0.5)]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = proposal = CMAReflector(step=1.0, seed=7, popsize=3).reflect(_request(trials), [])
    assert (np.random.get_state()[1] == before).all()  # cma's global draws are undone
    for k in range(1, 5):  # each proposal evaluated, then replayed from the trials alone
        trials.append(Trial(proposal.deltas, 0.5 + 0.01 * k))
        proposal = CMAReflector(step=1.0, seed=7, popsize=3).reflect(_request(trials), [])
        assert proposal == CMAReflector(step=1.0, seed=7, popsize=3).reflect(_request(trials), [])
    assert "generation 2, candidate 2 of 3" in proposal.summary  # 4 candidates told: one generation of 3, and 1
    assert first.deltas != CMAReflector(step=1.0, seed=8, popsize=3).reflect(_request([Trial(zero, 0.5)]), []).deltas


def test_cma_reflector_approaches_the_best_deltas_and_stays_in_bounds():
    """On a smooth composite peaking at deltas (2, -1, 0.5, 1.5), 60 CMA-ES trials end near the peak."""
    peak = np.array([2.0, -1.0, 0.5, 1.5])
    reflector = CMAReflector(step=1.0, seed=0)
    zero = dict.fromkeys(IDS, 0.0)
    trials = [Trial(zero, float(np.exp(-np.sum(peak**2))))]
    for _ in range(60):
        deltas = reflector.reflect(_request(trials, bound=3.0), []).deltas
        assert all(abs(v) <= 3.0 for v in deltas.values())
        trials.append(Trial(deltas, float(np.exp(-np.sum((np.array([deltas[c] for c in IDS]) - peak) ** 2)))))
    best = max(trials, key=lambda t: t.composite)
    assert np.linalg.norm([best.deltas[c] for c in IDS] - peak) < 0.5  # from 2.7 at zero deltas
