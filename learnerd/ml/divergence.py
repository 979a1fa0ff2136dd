"""KL and Jensen–Shannon divergence between two next-token distributions known only by their top-k.

A :class:`TokenDist` is what a model's view reports after a prompt: the ``k`` most likely token ids with
their log-probabilities, and the vocabulary size. The probability mass outside the top-k (the *tail*,
``1 - sum(exp(logprobs))``) is kept: :func:`aligned_probs` completes each distribution over the whole
vocabulary by spreading its tail evenly over the ``vocab_size - k`` ids absent from its top-k (the
maximum-entropy completion under the truncation). The two completed distributions are compared on the
union of the two top-k supports plus one bucket for every id in neither top-k: inside that bucket each
side's per-id probability is constant, so lumping it into one entry gives exactly the divergence over the
full vocabulary (the log-ratio is the same for every id of the bucket).

``completion="union"`` is dlm-sway 0.1.0's treatment instead (``probes/_divergence.py`` ``aligned_probs``
and ``_to_support``), for reports that must reproduce sway's numbers: each side's tail is spread over the
ids of the union that side's top-k lacks, the mass of the ids in neither top-k is dropped, and each vector
is renormalised. It is not the divergence of the two full distributions: on SmolLM2 (49,152 ids, top-256)
the union drops 13–20 % of the mass and its JS is 2.2 % off the exact value, against 0.04 % for
``"vocabulary"``.

Formulas (natural logarithms, so every value is in nats):

* ``KL(P ‖ Q) = Σ_i p_i (ln p_i − ln q_i)``, a term with ``p_i = 0`` counting 0 (Cover & Thomas,
  *Elements of Information Theory*, 2nd ed., eq. 2.26). Infinite when some ``q_i = 0 < p_i``.
* ``JS(P, Q) = ½ KL(P ‖ M) + ½ KL(Q ‖ M)`` with ``M = ½ (P + Q)`` (Lin 1991, "Divergence measures
  based on the Shannon entropy", IEEE Trans. Inf. Theory 37(1)); symmetric, always finite, in
  ``[0, ln 2]``.

**Direction of KL.** sway's documentation of its multi-turn probe says it computes ``KL(base ‖ ft)``,
while its divergence code (``probes/_divergence.py``: ``kl(q, p)`` with ``q`` the fine-tuned side)
computes ``KL(ft ‖ base)``. learnerd computes **KL(ft ‖ base)** — the expectation, under what the
fine-tuned model actually predicts, of how much more likely it finds each token than the base does.
That is the direction sway's numbers are really in (so learnerd's values and z-scores compare with
real sway reports) and the direction RL fine-tuning penalties use (the policy against its reference).

Bad input never yields a number: a non-finite log-probability, an empty top-k, duplicate or
out-of-range ids, a top-k whose mass exceeds 1, different vocabulary sizes, or an infinite KL raise
:class:`DivergenceError` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

DivergenceKind = Literal["kl", "js"]
Completion = Literal["vocabulary", "union"]
"""How a top-k's tail is completed: over the whole vocabulary (exact), or sway 0.1.0's union of the top-k."""
LN2 = math.log(2.0)
_MASS_TOLERANCE = 1e-6
"""How far above 1 a top-k's mass may sum (float rounding of a log-softmax) before it is refused."""


class DivergenceError(ValueError):
    """A distribution the divergence is not defined for (see the module docstring)."""


@dataclass(frozen=True)
class TokenDist:
    """The top-k of one next-token distribution.

    ``token_ids``: int64, shape ``(k,)``, distinct ids in ``[0, vocab_size)``; ``logprobs``: float64,
    shape ``(k,)``, natural-log probabilities of those ids; ``vocab_size``: the model's vocabulary size.
    """

    token_ids: NDArray[np.int64]
    logprobs: NDArray[np.float64]
    vocab_size: int

    @property
    def tail_mass(self) -> float:
        """Probability of the ids outside the top-k, ``max(0, 1 - Σ exp(logprobs))``."""
        return max(0.0, 1.0 - float(np.exp(self.logprobs).sum()))


def check_dist(dist: TokenDist, name: str = "distribution") -> None:
    """Refuse a :class:`TokenDist` no divergence is defined for.

    Raises:
        DivergenceError: the reason, naming ``name`` (e.g. ``"base"``).
    """
    ids, logprobs = np.asarray(dist.token_ids), np.asarray(dist.logprobs)
    if ids.ndim != 1 or logprobs.shape != ids.shape:
        raise DivergenceError(
            f"{name}: token_ids and logprobs must be 1-d of one length, not {ids.shape}, {logprobs.shape}"
        )
    if ids.size == 0:
        raise DivergenceError(f"{name}: empty top-k")
    if dist.vocab_size < ids.size:
        raise DivergenceError(f"{name}: top-{ids.size} of a vocabulary of {dist.vocab_size}")
    bad = int((~np.isfinite(logprobs)).sum())
    if bad:
        raise DivergenceError(f"{name}: {bad} non-finite log-probabilit{'y' if bad == 1 else 'ies'} (NaN or inf)")
    if ids.min() < 0 or ids.max() >= dist.vocab_size:
        raise DivergenceError(f"{name}: token ids must lie in [0, {dist.vocab_size})")
    if np.unique(ids).size != ids.size:
        raise DivergenceError(f"{name}: duplicate token ids in the top-k")
    mass = float(np.exp(logprobs).sum())
    if mass > 1.0 + _MASS_TOLERANCE:
        raise DivergenceError(f"{name}: the top-k holds probability {mass:.6f} > 1 (not log-probabilities?)")


def aligned_probs(p: TokenDist, q: TokenDist) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``p`` and ``q`` completed over the vocabulary and laid on one support: one entry per id of the
    union of their top-k ids (ascending), then — when some ids are in neither top-k — one entry holding
    the mass of all of them. Each vector is float64 and sums to 1.

    Raises:
        DivergenceError: either input is refused by :func:`check_dist`, or the vocabulary sizes differ.
    """
    check_dist(p, "p")
    check_dist(q, "q")
    if p.vocab_size != q.vocab_size:
        raise DivergenceError(f"vocabulary sizes differ: {p.vocab_size} vs {q.vocab_size}")
    union = np.union1d(p.token_ids, q.token_ids)
    rest = p.vocab_size - union.size
    return _complete(p, union, rest), _complete(q, union, rest)


def union_aligned_probs(p: TokenDist, q: TokenDist) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``p`` and ``q`` on the union of their top-k ids (ascending) only, as dlm-sway 0.1.0 aligns them
    (``probes/_divergence.py`` ``_to_support``): each side's tail mass ``max(0, 1 - Σ p)`` is spread evenly
    over the union entries it holds no probability for (an id missing from its top-k, or one whose
    probability underflows to 0), and each vector is renormalised to sum to 1. float64, shape ``(|union|,)``.

    Raises:
        DivergenceError: either input is refused by :func:`check_dist`, or the vocabulary sizes differ.
    """
    check_dist(p, "p")
    check_dist(q, "q")
    if p.vocab_size != q.vocab_size:
        raise DivergenceError(f"vocabulary sizes differ: {p.vocab_size} vs {q.vocab_size}")
    union = np.union1d(p.token_ids, q.token_ids)
    return _on_union(p, union), _on_union(q, union)


def _on_union(dist: TokenDist, union: NDArray[np.int64]) -> NDArray[np.float64]:
    probs = np.exp(np.asarray(dist.logprobs, dtype=np.float64))
    out = np.zeros(union.size, dtype=np.float64)
    out[np.searchsorted(union, dist.token_ids)] = probs
    unknown = out == 0.0
    tail = max(0.0, 1.0 - float(probs.sum()))
    if unknown.any() and tail > 0.0:
        out[unknown] = tail / int(unknown.sum())
    return out / out.sum()


def _complete(dist: TokenDist, union: NDArray[np.int64], rest: int) -> NDArray[np.float64]:
    probs = np.exp(np.asarray(dist.logprobs, dtype=np.float64))
    total = float(probs.sum())
    absent = dist.vocab_size - probs.size
    if absent == 0:
        probs = probs / total  # the top-k is the whole vocabulary: only rounding separates it from 1
    per_absent = max(0.0, 1.0 - float(probs.sum())) / absent if absent else 0.0
    out = np.full(union.size + (1 if rest else 0), per_absent, dtype=np.float64)
    out[np.searchsorted(union, dist.token_ids)] = probs
    if rest:
        out[-1] = per_absent * rest
    return out / out.sum()


def kl_divergence(p: NDArray[np.float64], q: NDArray[np.float64]) -> float:
    """``KL(p ‖ q)`` in nats of two probability vectors on one support (see the module docstring).

    Raises:
        DivergenceError: non-finite, negative or mismatched inputs, or ``q_i = 0 < p_i`` (KL is infinite).
    """
    p, q = _check_vectors(p, q)
    support = p > 0.0
    if np.any(q[support] <= 0.0):
        raise DivergenceError("KL is infinite: q gives probability 0 to an outcome p gives mass to")
    return max(0.0, float(np.sum(p[support] * (np.log(p[support]) - np.log(q[support])))))


def js_divergence(p: NDArray[np.float64], q: NDArray[np.float64]) -> float:
    """``JS(p, q)`` in nats, in ``[0, ln 2]`` (see the module docstring).

    Raises:
        DivergenceError: non-finite, negative or mismatched inputs.
    """
    p, q = _check_vectors(p, q)
    m = 0.5 * (p + q)
    return min(LN2, 0.5 * kl_divergence(p, m) + 0.5 * kl_divergence(q, m))


def divergence(
    base: TokenDist, ft: TokenDist, kind: DivergenceKind = "js", completion: Completion = "vocabulary"
) -> float:
    """The divergence of the fine-tuned view's next-token distribution from the base's, in nats:
    ``"kl"`` is ``KL(ft ‖ base)``, ``"js"`` is ``JS(base, ft)``; the tails completed over the vocabulary
    (:func:`aligned_probs`) or, ``completion="union"``, as sway 0.1.0 does (:func:`union_aligned_probs`).

    Raises:
        DivergenceError: see :func:`aligned_probs` and :func:`kl_divergence`; an unknown ``kind`` or
            ``completion``.
    """
    if completion == "vocabulary":
        p_base, p_ft = aligned_probs(base, ft)
    elif completion == "union":
        p_base, p_ft = union_aligned_probs(base, ft)
    else:
        raise DivergenceError(f"unknown completion {completion!r} (vocabulary or union)")
    if kind == "kl":
        return kl_divergence(p_ft, p_base)
    if kind == "js":
        return js_divergence(p_base, p_ft)
    raise DivergenceError(f"unknown divergence kind {kind!r} (kl or js)")


def _check_vectors(p: NDArray[np.float64], q: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1 or p.size == 0:
        raise DivergenceError(f"p and q must be non-empty 1-d vectors of one length, not {p.shape} and {q.shape}")
    for name, v in (("p", p), ("q", q)):
        if not np.all(np.isfinite(v)):
            raise DivergenceError(f"{name} holds NaN or inf")
        if np.any(v < 0.0):
            raise DivergenceError(f"{name} holds a negative probability")
        if abs(float(v.sum()) - 1.0) > _MASS_TOLERANCE:
            raise DivergenceError(f"{name} sums to {float(v.sum()):.6f}, not 1")
    return p, q
