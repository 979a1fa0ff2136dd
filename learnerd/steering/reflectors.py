"""Reflectors: given one iteration's evidence, propose the next deltas and a summary of what was learned.

Every iteration the loop builds a :class:`ReflectionRequest` (the minibatch's responses with their
verdicts and lengths, the deltas used, the scores, the cluster descriptions, the evolving summary and
every earlier trial), renders it into chat messages (:func:`reflector_messages`, written to
``reflector_message_NNN.txt``) and asks a reflector for a :class:`Reflection`: ``{"deltas": {id: float},
"summary": str}``, validated by :func:`parse_reflection` (exactly the clustering's ids, finite numbers
within each cluster's bounds).

* :class:`OpenAIReflector` sends the messages to an OpenAI-compatible chat-completions endpoint with a
  strict JSON schema naming every cluster id as a required property, and retries an invalid reply;
  when no reply is valid it raises :class:`InvalidReflectionError` and the loop skips the iteration's
  reflection.
* :class:`OfflineReflector` (the default) needs no network: a (1+1) evolution strategy with the
  one-fifth success rule (Rechenberg, 1973) over the delta vector, driven by the composite score
  alone. It is a pure function of the trials so far, so a resumed run proposes exactly what the
  uninterrupted run would have:

  - the parent starts as trial 0 (zero deltas) and the step size σ as ``step``;
  - each later trial whose composite is at least the parent's becomes the parent (ties are accepted,
    so the search drifts across plateaus) and σ grows by 1.5; otherwise σ shrinks by 1.5^(-1/4),
    which holds σ steady when one trial in five succeeds; σ stays within [``step``/1000, half the widest
    cluster's bounds];
  - the next candidate is ``clip(parent + σ·z, low, high)`` (each cluster's bounds) with ``z`` standard
    normal from a generator seeded by (``seed``, number of trials).
* :class:`CMAReflector` (``reflector = "cma"``, needs ``pip install cma``): CMA-ES with step-size and
  covariance adaptation over generations of candidates, equally a pure function of the trials.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from learnerd.steering.chat import InvalidRepliesError, StructuredChatError, structured_chat
from learnerd.steering.processor import SteeringError, deltas_json, validate_deltas

SUCCESS_FACTOR = 1.5
FAILURE_FACTOR = SUCCESS_FACTOR**-0.25


class ReflectorError(RuntimeError):
    """The reflector gave no valid proposal (endpoint failure, or invalid replies on every attempt)."""


class InvalidReflectionError(ReflectorError):
    """The reflector answered, but no reply was valid in the allowed attempts: the evolution loop skips
    this iteration's reflection (the next iteration evaluates the same deltas) instead of stopping."""


@dataclass(frozen=True)
class ResponseRecord:
    """One minibatch answer: the question, reference, response, its length in tokens, and the verdict."""

    question: str
    reference: str
    response: str
    tokens: int
    correct: bool
    explanation: str


@dataclass(frozen=True)
class Scores:
    """An iteration's scores: ``mean_len`` (tokens), ``correctness`` (ratio in [0, 1]), ``shortness`` =
    1 / (1 + mean_len / scale) and ``composite`` = 0.4·shortness + 0.6·correctness."""

    mean_len: float
    correctness: float
    shortness: float
    composite: float


@dataclass(frozen=True)
class Trial:
    """Deltas that were evaluated and the composite they scored."""

    deltas: dict[int, float]
    composite: float


@dataclass(frozen=True)
class ReflectionRequest:
    """What a reflector sees after iteration ``iteration`` (the last of ``trials`` is this iteration)."""

    iteration: int
    deltas: dict[int, float]
    responses: tuple[ResponseRecord, ...]
    scores: Scores
    cluster_descriptions: dict[str, Any]
    summary: str
    trials: tuple[Trial, ...]
    cluster_ids: tuple[int, ...]
    bounds: Mapping[int, tuple[float, float]]
    """each cluster id's ``[low, high]`` (logits): ``[-delta_bound, delta_bound]`` unless ``cluster_bounds`` says"""
    scale: float

    def limits(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)``: float64 arrays of shape ``(len(cluster_ids),)`` in ``cluster_ids`` order."""
        low, high = zip(*(self.bounds[c] for c in self.cluster_ids), strict=True)
        return np.array(low, dtype=np.float64), np.array(high, dtype=np.float64)

    def widest_half(self) -> float:
        """Half the widest cluster's ``high - low`` (logits): the largest step a search takes."""
        low, high = self.limits()
        return float(np.max(high - low)) / 2


@dataclass(frozen=True)
class Reflection:
    """A reflector's proposal: the next ``deltas`` (by cluster id) and a ``summary`` to append."""

    deltas: dict[int, float]
    summary: str


class Reflector(Protocol):
    name: str

    def reflect(self, request: ReflectionRequest, messages: Sequence[dict[str, str]]) -> Reflection:
        """The next deltas. Raises :class:`ReflectorError` when no valid proposal can be had
        (:class:`InvalidReflectionError` when the reflector answered, but never validly)."""
        ...


REFLECTOR_SYSTEM = """\
You tune decode-time steering of a language model. Every token of its vocabulary belongs to one cluster; \
the steering adds one delta (in logits) per cluster to every token of that cluster at every decoding step. \
A positive delta makes the cluster's tokens more likely, a negative one less likely. Cluster 0 holds the \
end-of-sequence tokens (a positive delta ends answers sooner), cluster 1 numbers and arithmetic symbols, \
the others come from k-means over token embeddings (see their sample tokens).

Goal: shorter answers that stay correct. Each iteration is scored on a minibatch of questions:
  shortness = 1 / (1 + mean_len / scale), composite = 0.4 * shortness + 0.6 * correctness_ratio.
Propose the deltas for the next iteration and a short summary of what you learned (it is appended to \
the evolving summary you will see next time). Reply with JSON: {"deltas": {"<cluster id>": number, ...}, \
"summary": "..."} naming every cluster id exactly once."""


def reflector_messages(request: ReflectionRequest) -> list[dict[str, str]]:
    """The chat messages (system, user) sent to a reflector for ``request``."""
    s = request.scores
    lines = [
        f"## Iteration {request.iteration}",
        "",
        f"Deltas used (bounds: {', '.join(f'{c} in [{lo:g}, {hi:g}]' for c, (lo, hi) in request.bounds.items())}):",
        json.dumps(deltas_json(request.deltas)),
        "",
        f"Scores: mean_len {s.mean_len:.2f} tokens (scale {request.scale:g}), correctness {s.correctness:.3f}, "
        f"shortness {s.shortness:.4f}, composite {s.composite:.4f}",
        "",
        "## Clusters",
    ]
    for c in request.cluster_descriptions.get("clusters", []):
        samples = ", ".join(json.dumps(t, ensure_ascii=False) for t in c.get("samples", []))
        lines.append(f"- {c['id']} ({c.get('kind', '?')}, {c.get('size', '?')} tokens): {c.get('meaning', '')}")
        lines.append(f"  samples: {samples}")
    lines += ["", f"## Responses ({len(request.responses)})"]
    for n, r in enumerate(request.responses, start=1):
        verdict = "correct" if r.correct else "WRONG"
        lines += [
            f"{n}. Question: {r.question}",
            f"   Reference: {r.reference}",
            f"   Response ({r.tokens} tokens): {r.response}",
            f"   Verdict: {verdict} — {r.explanation}",
        ]
    lines += ["", "## Earlier trials (iteration: composite, deltas)"]
    for i, t in enumerate(request.trials[:-1]):
        lines.append(f"- {i}: {t.composite:.4f} {json.dumps(deltas_json(t.deltas))}")
    if len(request.trials) <= 1:
        lines.append("(none)")
    lines += ["", "## Evolving summary", request.summary or "(empty: this is the first iteration)", ""]
    lines.append(
        f"Reply with the deltas for iteration {request.iteration + 1} for cluster ids "
        f"{', '.join(str(c) for c in request.cluster_ids)} and your summary."
    )
    return [{"role": "system", "content": REFLECTOR_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def format_messages(messages: Sequence[dict[str, str]]) -> str:
    """The messages as one text (``reflector_message_NNN.txt``): each under a ``=== role ===`` line."""
    return "".join(f"=== {m['role']} ===\n{m['content']}\n\n" for m in messages)


def reflection_schema(cluster_ids: Sequence[int]) -> dict[str, Any]:
    """The strict JSON schema of a reply: ``deltas`` with every cluster id a required number, ``summary``."""
    ids = [str(c) for c in cluster_ids]
    return {
        "type": "object",
        "properties": {
            "deltas": {
                "type": "object",
                "properties": {i: {"type": "number"} for i in ids},
                "required": ids,
                "additionalProperties": False,
            },
            "summary": {"type": "string"},
        },
        "required": ["deltas", "summary"],
        "additionalProperties": False,
    }


def parse_reflection(
    raw: Any, cluster_ids: Sequence[int], bounds: Mapping[int, tuple[float, float]] | None = None
) -> Reflection:
    """Validate a decoded reply.

    Raises:
        SteeringError: not ``{"deltas": {...}, "summary": str}``, or the deltas are invalid
            (:func:`learnerd.steering.processor.validate_deltas`).
    """
    if not isinstance(raw, Mapping) or set(raw) != {"deltas", "summary"}:
        raise SteeringError("expected an object with exactly the keys deltas and summary")
    if not isinstance(raw["summary"], str):
        raise SteeringError("summary must be a string")
    return Reflection(validate_deltas(raw["deltas"], cluster_ids, bounds), raw["summary"].strip())


class OpenAIReflector:
    """A chat model as the reflector (module docstring).

    Args:
        client: an ``openai.OpenAI`` client (:func:`learnerd.steering.chat.make_client`).
        model: e.g. ``gpt-4o``.
        max_attempts: requests per iteration before :class:`InvalidReflectionError`.
    """

    name = "openai"

    def __init__(self, client: Any, model: str = "gpt-4o", max_attempts: int = 3) -> None:
        self.client = client
        self.model = model
        self.max_attempts = max_attempts

    def reflect(self, request: ReflectionRequest, messages: Sequence[dict[str, str]]) -> Reflection:
        try:
            return structured_chat(
                self.client,
                model=self.model,
                messages=messages,
                name="steering_deltas",
                schema=reflection_schema(request.cluster_ids),
                parse=lambda raw: parse_reflection(raw, request.cluster_ids, request.bounds),
                max_attempts=self.max_attempts,
            )
        except InvalidRepliesError as exc:
            raise InvalidReflectionError(str(exc)) from exc
        except StructuredChatError as exc:
            raise ReflectorError(str(exc)) from exc


class OfflineReflector:
    """(1+1)-ES with the one-fifth success rule (module docstring); deterministic given ``seed``.

    Args:
        step: the initial step size σ (logits).
        seed: seeds the perturbations.
    """

    name = "offline"

    def __init__(self, step: float = 1.0, seed: int = 0) -> None:
        if not (step > 0 and math.isfinite(step)):
            raise ValueError("step must be a positive finite number")
        self.step = step
        self.seed = seed

    def reflect(self, request: ReflectionRequest, messages: Sequence[dict[str, str]]) -> Reflection:
        ids = request.cluster_ids
        low, high = request.limits()
        widest = request.widest_half() or self.step
        trials = request.trials
        parent, sigma, accepted, against = trials[0], self.step, None, trials[0].composite
        for trial in trials[1:]:
            against = parent.composite
            accepted = trial.composite >= against
            if accepted:
                parent, sigma = trial, sigma * SUCCESS_FACTOR
            else:
                sigma *= FAILURE_FACTOR
            sigma = min(max(sigma, self.step / 1000), widest)
        rng = np.random.default_rng([self.seed, len(trials)])
        centre = np.array([parent.deltas[c] for c in ids], dtype=np.float64)
        candidate = np.clip(centre + sigma * rng.standard_normal(len(ids)), low, high)
        last = trials[-1].composite
        if accepted is None:
            verdict = f"baseline composite {last:.4f}"
        else:
            verdict = (
                f"composite {last:.4f} {'accepted' if accepted else 'rejected'} against the parent's {against:.4f}"
            )
        moved = sorted(ids, key=lambda c: -abs(candidate[ids.index(c)] - parent.deltas[c]))[:3]
        summary = (
            f"iteration {request.iteration}: {verdict}; step size {sigma:.3g}; next: perturb every delta around "
            f"the parent, most in cluster(s) {', '.join(str(c) for c in moved)}"
        )
        proposal = {"deltas": deltas_json(dict(zip(ids, candidate.tolist(), strict=True))), "summary": summary}
        return parse_reflection(proposal, ids, request.bounds)


class CMAReflector:
    """CMA-ES (Hansen's covariance matrix adaptation, the ``cma`` library) over the delta vector, one
    candidate per iteration; deterministic given ``seed``.

    Trial 0 (zero deltas, the unsteered model) is the baseline; trials 1, 2, ... are the candidates of
    generations of ``popsize`` (0 = cma's default, 4 + ⌊3 ln n⌋ for n clusters), told to the strategy with
    fitness ``-composite`` when a generation is complete. The strategy starts at zero deltas (clipped into
    the bounds) with step size ``step`` and keeps every candidate within each cluster's bounds (cma's
    ``bounds`` option). Like
    :class:`OfflineReflector` it is a pure function of the trials: each call replays them into a new
    strategy seeded by ``seed`` (numpy's global generator, which cma draws from, is restored afterwards).

    Args:
        step: the initial step size σ0 (logits).
        seed: cma's seed (``seed + 1``: cma reads 0 as "random").
        popsize: candidates per generation (0 = cma's default).

    Raises:
        ImportError: ``cma`` is not installed (``pip install cma``).
    """

    name = "cma"

    def __init__(self, step: float = 1.0, seed: int = 0, popsize: int = 0) -> None:
        if not (step > 0 and math.isfinite(step)):
            raise ValueError("step must be a positive finite number")
        if popsize < 0 or popsize == 1:
            raise ValueError("popsize must be 0 (cma's default) or at least 2")
        import cma  # noqa: F401 - fail at construction, not after the first iteration

        self.step = step
        self.seed = seed
        self.popsize = popsize

    def reflect(self, request: ReflectionRequest, messages: Sequence[dict[str, str]]) -> Reflection:
        import cma

        ids = request.cluster_ids
        low, high = request.limits()
        state = np.random.get_state()
        try:
            options = {"seed": self.seed + 1, "bounds": [low.tolist(), high.tolist()], "verbose": -9}
            if self.popsize:
                options["popsize"] = self.popsize
            step = min(self.step, request.widest_half() or self.step)
            es = cma.CMAEvolutionStrategy(np.clip(np.zeros(len(ids)), low, high), step, options)
            generation, fitness = es.ask(), []
            for trial in request.trials[1:]:
                fitness.append(-trial.composite)
                if len(fitness) == len(generation):
                    es.tell(generation, fitness)
                    generation, fitness = es.ask(), []
            candidate = np.clip(generation[len(fitness)], low, high)
        finally:
            np.random.set_state(state)
        best = max(request.trials, key=lambda t: t.composite)
        summary = (
            f"iteration {request.iteration}: composite {request.trials[-1].composite:.4f} (best so far "
            f"{best.composite:.4f}); CMA-ES generation {es.countiter + 1}, candidate {len(fitness) + 1} of "
            f"{len(generation)}, step size {es.sigma:.3g}"
        )
        proposal = {"deltas": deltas_json(dict(zip(ids, candidate.tolist(), strict=True))), "summary": summary}
        return parse_reflection(proposal, ids, request.bounds)
