"""KL and JS divergence against values worked out by hand, tail-mass completion included."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerd.ml.divergence import (
    LN2,
    DivergenceError,
    TokenDist,
    aligned_probs,
    divergence,
    js_divergence,
    kl_divergence,
    union_aligned_probs,
)


def dist(ids, probs, vocab):
    return TokenDist(np.asarray(ids, dtype=np.int64), np.log(np.asarray(probs, dtype=np.float64)), vocab)


# Vocabulary of 4. base: top-2 {0: .5, 1: .3}, tail .2 spread over ids 2 and 3 (.1 each).
# ft: top-2 {1: .6, 2: .2}, tail .2 spread over ids 0 and 3 (.1 each). Id 3 is in neither top-k.
BASE = dist([0, 1], [0.5, 0.3], 4)
FT = dist([1, 2], [0.6, 0.2], 4)
P_BASE = [0.5, 0.3, 0.1, 0.1]
P_FT = [0.1, 0.6, 0.2, 0.1]


def test_tail_mass_is_spread_over_the_ids_absent_from_each_top_k():
    assert BASE.tail_mass == pytest.approx(0.2)
    p_base, p_ft = aligned_probs(BASE, FT)
    np.testing.assert_allclose(p_base, P_BASE)  # union {0, 1, 2} then the bucket {3}
    np.testing.assert_allclose(p_ft, P_FT)


def test_kl_is_ft_against_base_by_hand():
    by_hand = 0.1 * math.log(0.1 / 0.5) + 0.6 * math.log(0.6 / 0.3) + 0.2 * math.log(0.2 / 0.1) + 0.1 * math.log(1.0)
    assert by_hand == pytest.approx(0.8 * math.log(2) - 0.1 * math.log(5))  # = 0.3935740 nats
    assert divergence(BASE, FT, "kl") == pytest.approx(by_hand, rel=1e-12)
    reverse = 0.5 * math.log(0.5 / 0.1) + 0.3 * math.log(0.3 / 0.6) + 0.1 * math.log(0.1 / 0.2)
    assert divergence(FT, BASE, "kl") == pytest.approx(reverse, rel=1e-12)  # KL is not symmetric
    assert reverse != pytest.approx(by_hand)


def test_js_by_hand_is_symmetric():
    m = [0.3, 0.45, 0.15, 0.1]
    kl_pm = sum(p * math.log(p / mm) for p, mm in zip(P_BASE, m, strict=True))
    kl_qm = sum(q * math.log(q / mm) for q, mm in zip(P_FT, m, strict=True))
    by_hand = 0.5 * kl_pm + 0.5 * kl_qm
    assert divergence(BASE, FT, "js") == pytest.approx(by_hand, rel=1e-12)
    assert divergence(FT, BASE, "js") == pytest.approx(by_hand, rel=1e-12)


def test_the_bucket_of_ids_in_neither_top_k_equals_the_full_vocabulary_sum():
    # A vocabulary of 1000 where each side knows 2 ids: the 997 ids in neither top-k are one bucket.
    base, ft = dist([0, 1], [0.5, 0.2], 1000), dist([1, 2], [0.4, 0.4], 1000)
    full_base = np.full(1000, 0.3 / 998)
    full_base[[0, 1]] = [0.5, 0.2]
    full_ft = np.full(1000, 0.2 / 998)
    full_ft[[1, 2]] = [0.4, 0.4]
    by_hand = float(np.sum(full_ft * np.log(full_ft / full_base)))
    assert divergence(base, ft, "kl") == pytest.approx(by_hand, rel=1e-9)
    assert aligned_probs(base, ft)[0].shape == (4,)


def test_identical_is_zero_and_disjoint_point_masses_reach_ln2():
    assert divergence(BASE, BASE, "kl") == 0.0 and divergence(BASE, BASE, "js") == 0.0
    one, two = dist([0], [1.0], 2), dist([1], [1.0], 2)
    assert divergence(one, two, "js") == pytest.approx(LN2, rel=1e-12)
    with pytest.raises(DivergenceError, match="KL is infinite"):
        divergence(one, two, "kl")


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (TokenDist(np.array([0, 1]), np.array([math.nan, -1.0]), 4), "non-finite"),
        (TokenDist(np.array([0, 1]), np.array([-math.inf, -1.0]), 4), "non-finite"),
        (TokenDist(np.array([], dtype=np.int64), np.array([]), 4), "empty top-k"),
        (dist([0, 0], [0.2, 0.2], 4), "duplicate"),
        (dist([0, 7], [0.2, 0.2], 4), r"\[0, 4\)"),
        (dist([0, 1], [0.7, 0.6], 4), "> 1"),
        (dist([0, 1], [0.5, 0.3], 8), "vocabulary sizes differ"),
    ],
)
def test_bad_input_raises_a_clear_error(bad, needle):
    with pytest.raises(DivergenceError, match=needle):
        divergence(BASE, bad, "js")


def test_vector_functions_refuse_what_is_not_a_distribution():
    with pytest.raises(DivergenceError, match="NaN"):
        kl_divergence(np.array([0.5, math.nan]), np.array([0.5, 0.5]))
    with pytest.raises(DivergenceError, match="sums to"):
        js_divergence(np.array([0.5, 0.6]), np.array([0.5, 0.5]))
    with pytest.raises(DivergenceError, match="unknown divergence kind"):
        divergence(BASE, FT, "tv")  # type: ignore[arg-type]
    with pytest.raises(DivergenceError, match="unknown completion"):
        divergence(BASE, FT, "js", "bucket")  # type: ignore[arg-type]


def test_union_completion_spreads_each_tail_over_the_union_only_and_drops_the_rest():
    # sway 0.1.0's treatment: union {0, 1, 2}; base's tail .2 goes to id 2 alone, ft's tail .2 to id 0 alone;
    # id 3 (in neither top-k) is dropped, and both already sum to 1 on the union.
    p_base, p_ft = union_aligned_probs(BASE, FT)
    np.testing.assert_allclose(p_base, [0.5, 0.3, 0.2])
    np.testing.assert_allclose(p_ft, [0.2, 0.6, 0.2])
    by_hand = 0.2 * math.log(0.2 / 0.5) + 0.6 * math.log(0.6 / 0.3) + 0.2 * math.log(0.2 / 0.2)
    assert divergence(BASE, FT, "kl", "union") == pytest.approx(by_hand, rel=1e-12)
    assert divergence(BASE, FT, "kl", "union") != pytest.approx(divergence(BASE, FT, "kl"), rel=1e-3)


def test_union_completion_renormalises_when_every_union_id_is_known():
    # both sides know ids {0, 1}: no entry to spread a tail over, each side renormalised on the union
    base, ft = dist([0, 1], [0.4, 0.4], 10), dist([0, 1], [0.6, 0.2], 10)
    p_base, p_ft = union_aligned_probs(base, ft)
    np.testing.assert_allclose(p_base, [0.5, 0.5])
    np.testing.assert_allclose(p_ft, [0.75, 0.25])


@pytest.mark.parametrize("kind", ["js", "kl"])
def test_union_completion_gives_the_released_sways_divergence(kind):
    sway_div = pytest.importorskip("dlm_sway.probes._divergence", reason="dlm-sway 0.1.0 is not installed")
    from dlm_sway.core.scoring import TokenDist as SwayDist

    rng = np.random.default_rng(24)  # fixed draws: heavy and light tails, overlapping and disjoint top-k
    for _ in range(50):
        a, b = rng.dirichlet(np.full(40, 0.3)), rng.dirichlet(np.full(40, 0.3))
        ka, kb = rng.integers(2, 13, size=2)
        ia, ib = np.argsort(-a)[:ka], np.argsort(-b)[:kb]
        da, db = dist(ia, a[ia], 40), dist(ib, b[ib], 40)
        theirs = sway_div.divergence(
            SwayDist(da.token_ids, da.logprobs, 40), SwayDist(db.token_ids, db.logprobs, 40), kind
        )
        assert divergence(da, db, kind, "union") == pytest.approx(theirs, rel=1e-9, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.01, 10.0), min_size=6, max_size=6),
    st.lists(st.floats(0.01, 10.0), min_size=6, max_size=6),
    st.integers(1, 6),
    st.integers(1, 6),
)
def test_bounds_hold_for_any_pair_of_truncated_distributions(wa, wb, ka, kb):
    a, b = np.array(wa) / sum(wa), np.array(wb) / sum(wb)
    ia, ib = np.argsort(-a)[:ka], np.argsort(-b)[:kb]
    da, db = dist(ia, a[ia], 6), dist(ib, b[ib], 6)
    js = divergence(da, db, "js")
    assert 0.0 <= js <= LN2 + 1e-12
    assert js == pytest.approx(divergence(db, da, "js"), abs=1e-12)
    assert divergence(da, db, "kl") >= 0.0  # Gibbs' inequality
    assert js <= 0.5 * (divergence(da, db, "kl") + divergence(db, da, "kl")) + 1e-12
