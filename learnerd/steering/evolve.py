"""The steering-delta evolution loop: tune one logit delta per vocabulary cluster so that answers get
shorter without getting less correct (the plan of compressor_2's "evolution of steering deltas").

Iteration ``i`` (0-based; iteration 0 evaluates zero deltas, the unsteered model, or
the nearest point of ``cluster_bounds`` that exclude zero):

1. sample ``minibatch_size`` pool items without replacement, from a generator seeded by (``seed``, ``i``)
   so a resumed run samples what the uninterrupted one would have;
2. answer each greedily through :class:`~learnerd.steering.processor.ClusterBiasProcessor` with the
   current deltas; a response's length is its generated tokens before the first EOS;
3. judge each response (a :class:`~learnerd.steering.judges.Verdict` with an explanation);
4. score: ``shortness = 1 / (1 + mean_len / scale)``, ``composite = 0.4·shortness + 0.6·correctness``
   (``correctness`` = the ratio of correct responses);
5. if the composite beats the best so far (strictly), write ``deltas_best.json``;
6. render the reflector's messages (responses, verdicts, deltas, scores, cluster descriptions, the
   evolving summary: the last :data:`SUMMARY_WINDOW` summaries), log them and write
   ``reflector_message_NNN.txt``; ask the reflector for the next deltas and a summary (validated);
   when it answers but never validly (:class:`~learnerd.steering.reflectors.InvalidReflectionError`,
   after its retries) the reflection is skipped: the entry records ``reflection_skipped`` (the reason),
   an empty summary, and proposes the deltas it evaluated, so the next iteration evaluates them again on
   its own minibatch;
7. append the iteration to ``history.json``, write the proposal to ``deltas_current.json``, redraw
   ``evolution.png``.

Every file is replaced atomically. The run directory holds::

    run.json                   the run's fixed parameters; a resumed run must match them
    token_clusters.json        the clustering (copied from the cache) that the deltas files reference
    cluster_descriptions.json
    history.json               {"schema_version": 1, "iterations": [entry, ...]}
    deltas_current.json        steering file: the deltas the next iteration evaluates
    deltas_best.json           steering file: the best deltas so far, "evaluation" = their iteration and scores
    reflector_message_NNN.txt  the full messages sent to the reflector after iteration NNN
    evolution.png              composite, correctness and mean length per iteration

A history entry: ``iteration``, ``deltas`` (evaluated), ``sample`` (pool indices), ``responses``
(``index``, ``question``, ``reference``, ``response``, ``tokens``, ``correct``, ``explanation``),
``mean_len``, ``correctness``, ``shortness``, ``composite``, ``reflector``, ``summary``, ``proposed``
(the next deltas), ``reflection_skipped`` (only when the reflection was skipped: why),
``seconds`` (wall time of the iteration) and ``finished_at`` (ISO 8601 UTC).

Stopping: when ``stop`` is set (the CLI sets it on SIGINT/SIGTERM) generation stops at the next token,
the unfinished iteration is dropped, and :func:`run_evolution` returns ``"stopped"`` with every file of
the finished iterations on disk. Run it again on the same directory and it continues from
``history.json`` up to ``iterations`` in all.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import structlog
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from learnerd.ml.generate import Reply, greedy_reply
from learnerd.steering.clusters import VocabularyClusters, map_bytes, save_clusters
from learnerd.steering.judges import Judge
from learnerd.steering.plot import render_evolution_png
from learnerd.steering.pool import PoolItem, pool_sha256
from learnerd.steering.processor import (
    ClusterBiasProcessor,
    SteeringError,
    deltas_json,
    processor_for,
    read_steering,
    validate_deltas,
    write_steering,
)
from learnerd.steering.reflectors import (
    InvalidReflectionError,
    Reflection,
    ReflectionRequest,
    Reflector,
    ResponseRecord,
    Scores,
    Trial,
    format_messages,
    reflector_messages,
)
from learnerd.steering.settings import EvolutionSettings
from learnerd.store.atomic import atomic_write_bytes, atomic_write_text

log = structlog.get_logger(__name__)

RUN_FILE = "run.json"
HISTORY_FILE = "history.json"
CURRENT_FILE = "deltas_current.json"
BEST_FILE = "deltas_best.json"
PLOT_FILE = "evolution.png"
SCHEMA_VERSION = 1
SHORTNESS_WEIGHT = 0.4
CORRECTNESS_WEIGHT = 0.6
SUMMARY_WINDOW = 20
"""The evolving summary is made of the last this many iteration summaries."""


class EvolutionError(RuntimeError):
    """The run directory belongs to another run (parameters differ) or its history is unreadable."""


@dataclass(frozen=True)
class EvolutionOutcome:
    """``status``: ``finished`` (``iterations`` reached) or ``stopped``; the whole ``history``; ``best``:
    ``deltas_best.json``'s evaluation (iteration, scores) or None when no iteration finished."""

    status: Literal["finished", "stopped"]
    history: list[dict[str, Any]]
    best: dict[str, Any] | None


def score(lengths: Sequence[int], correct: Sequence[bool], scale: float) -> Scores:
    """The iteration's :class:`~learnerd.steering.reflectors.Scores` from response lengths (tokens) and verdicts."""
    mean_len = sum(lengths) / len(lengths)
    correctness = sum(correct) / len(correct)
    shortness = 1.0 / (1.0 + mean_len / scale)
    return Scores(mean_len, correctness, shortness, SHORTNESS_WEIGHT * shortness + CORRECTNESS_WEIGHT * correctness)


class PoolModel(Protocol):
    """What answers the pool: :class:`SteeredModel` in process, or :class:`learnerd.steering.server.ServedModel`
    through the server."""

    tokenizer: Any
    system: str | None
    max_new_tokens: int

    def reply(
        self, question: str, processor: ClusterBiasProcessor | None, stop: threading.Event | None = None
    ) -> Reply: ...


@dataclass
class SteeredModel:
    """The model answering the pool: a causal LM (or ``PeftModel``), its tokenizer, the document's system
    prompt, and the longest answer (tokens)."""

    model: Any
    tokenizer: Any
    system: str | None = None
    max_new_tokens: int = 128

    def reply(
        self, question: str, processor: ClusterBiasProcessor | None, stop: threading.Event | None = None
    ) -> Reply:
        """Greedy reply to ``question`` steered by ``processor``; cut short when ``stop`` is set."""
        return greedy_reply(
            self.model,
            self.tokenizer,
            question,
            system=self.system,
            max_new_tokens=self.max_new_tokens,
            logits_processor=LogitsProcessorList([processor]) if processor is not None else None,
            stopping_criteria=StoppingCriteriaList([_StopOnEvent(stop)]) if stop is not None else None,
        )


class _StopOnEvent(StoppingCriteria):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def minibatch(pool_size: int, size: int, seed: int, iteration: int) -> list[int]:
    """Pool indices of iteration ``iteration``'s minibatch: ``min(size, pool_size)`` distinct indices."""
    rng = random.Random(f"learnerd-steering:{seed}:{iteration}")
    return rng.sample(range(pool_size), min(size, pool_size))


def run_parameters(
    clusters: VocabularyClusters,
    pool: Sequence[PoolItem],
    settings: EvolutionSettings,
    reflector: Reflector,
    judge: Judge,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """``run.json``: what a resumed run must share with the run it continues (not ``iterations``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tokenizer_identity": clusters.tokenizer_identity,
        "clusters_sha256": hashlib.sha256(map_bytes(clusters)).hexdigest(),
        "k": clusters.k,
        "embedder": clusters.embedder,
        "pool_sha256": pool_sha256(pool),
        "pool_size": len(pool),
        "minibatch_size": settings.minibatch_size,
        "scale": settings.scale,
        "delta_bound": settings.delta_bound,
        **({"cluster_bounds": _bounds_json(settings)} if settings.cluster_bounds else {}),  # older runs lack it
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "reflector": reflector.name,
        "judge": judge.name,
        **dict(extra),
    }


def run_evolution(
    run_dir: str | Path,
    *,
    model: PoolModel,
    clusters: VocabularyClusters,
    pool: Sequence[PoolItem],
    judge: Judge,
    reflector: Reflector,
    settings: EvolutionSettings,
    extra_parameters: Mapping[str, Any] | None = None,
    stop: threading.Event | None = None,
    on_answer: Callable[[int, int, int], None] | None = None,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    on_deltas: Callable[[Path], None] | None = None,
) -> EvolutionOutcome:
    """Run (or resume) an evolution in ``run_dir`` until ``settings.iterations`` iterations are in its
    history or ``stop`` is set (module docstring).

    Args:
        clusters: the vocabulary clustering of ``model.tokenizer`` (copied into ``run_dir``).
        pool: the questions (at least one).
        extra_parameters: JSON values added to ``run.json`` (e.g. the base model and adapter).
        on_answer: called with ``(iteration, answers done, minibatch size)`` after each answer.
        on_iteration: called with each finished history entry.
        on_deltas: called before each iteration answers its minibatch, with the steering file holding
            the deltas it evaluates (``deltas_current.json``): an external server restarts with it
            (:class:`learnerd.steering.server.ExternalServer`).

    Raises:
        EvolutionError: ``run_dir`` holds a run with other parameters, or an unreadable history.
        ReflectorError, JudgeError: the reflector or judge failed (finished iterations stay on disk); not
            :class:`~learnerd.steering.reflectors.InvalidReflectionError`, which skips the reflection.
    """
    if not pool:
        raise EvolutionError("the pool is empty")
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    params = run_parameters(clusters, pool, settings, reflector, judge, extra_parameters or {})
    _check_run_file(run, params)  # before anything in the directory is replaced
    clusters = save_clusters(clusters, run)
    history = _read_history(run, clusters.cluster_ids)
    best = _read_best(run)
    ids = clusters.cluster_ids
    unknown = sorted(set(settings.cluster_bounds) - set(ids))
    if unknown:
        raise EvolutionError(f"cluster_bounds names cluster id(s) {unknown}; the clustering has {list(ids)}")
    bounds = {c: settings.interval(c) for c in ids}
    start = {c: min(max(0.0, low), high) for c, (low, high) in bounds.items()}  # zero deltas, clipped into the bounds
    deltas = validate_deltas(history[-1]["proposed"] if history else start, ids, bounds)
    if history:
        log.info("resuming evolution", run_dir=str(run), iterations_done=len(history), target=settings.iterations)
    stop = stop or threading.Event()
    for i in range(len(history), settings.iterations):
        if stop.is_set():
            break
        started = time.monotonic()
        processor = processor_for(clusters, deltas)
        if on_deltas is not None:
            if not history and not (run / CURRENT_FILE).exists():
                write_steering(run / CURRENT_FILE, deltas, clusters, evaluation={"proposed_after_iteration": None})
            on_deltas(run / CURRENT_FILE)
            if stop.is_set():
                break
        sample = minibatch(len(pool), settings.minibatch_size, settings.seed, i)
        progress = functools.partial(on_answer, i) if on_answer is not None else None
        records = answer_items(model, processor, [pool[j] for j in sample], judge, stop, progress)
        if records is None:
            break
        scores = score([r.tokens for r in records], [r.correct for r in records], settings.scale)
        if best is None or scores.composite > best["composite"]:
            best = {"iteration": i, **asdict(scores)}
            write_steering(run / BEST_FILE, deltas, clusters, evaluation=best)
        trials = (
            *(Trial(validate_deltas(h["deltas"], ids), h["composite"]) for h in history),
            Trial(deltas, scores.composite),
        )
        request = ReflectionRequest(
            iteration=i,
            deltas=deltas,
            responses=tuple(records),
            scores=scores,
            cluster_descriptions=clusters.descriptions,
            summary=_evolving_summary(history, SUMMARY_WINDOW),
            trials=trials,
            cluster_ids=ids,
            bounds=bounds,
            scale=settings.scale,
        )
        messages = reflector_messages(request)
        text = format_messages(messages)
        message_file = run / f"reflector_message_{i:03d}.txt"
        atomic_write_text(message_file, text)
        log.info("reflector message", iteration=i, reflector=reflector.name, file=str(message_file), message=text)
        skipped = None
        try:
            reflection = reflector.reflect(request, messages)
        except InvalidReflectionError as exc:
            skipped = str(exc)
            log.warning("reflection skipped: no valid reply", iteration=i, reflector=reflector.name, error=skipped)
            reflection = Reflection(deltas, "")
        entry = {
            "iteration": i,
            "deltas": deltas_json(deltas),
            "sample": sample,
            "responses": [{"index": j, **asdict(r)} for j, r in zip(sample, records, strict=True)],
            **asdict(scores),
            "reflector": reflector.name,
            "summary": reflection.summary,
            "proposed": deltas_json(reflection.deltas),
            **({"reflection_skipped": skipped} if skipped is not None else {}),
            "seconds": round(time.monotonic() - started, 3),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        history.append(entry)
        _write_history(run, history)
        write_steering(run / CURRENT_FILE, reflection.deltas, clusters, evaluation={"proposed_after_iteration": i})
        atomic_write_bytes(run / PLOT_FILE, render_evolution_png(history))
        log.info(
            "iteration finished",
            iteration=i,
            mean_len=round(scores.mean_len, 2),
            correctness=round(scores.correctness, 3),
            composite=round(scores.composite, 4),
            best_iteration=best["iteration"],
            best_composite=round(best["composite"], 4),
            summary=reflection.summary,
        )
        if on_iteration is not None:
            on_iteration(entry)
        deltas = reflection.deltas
    status: Literal["finished", "stopped"] = "finished" if len(history) >= settings.iterations else "stopped"
    return EvolutionOutcome(status=status, history=history, best=best)


def answer_items(
    model: PoolModel,
    processor: ClusterBiasProcessor | None,
    items: Sequence[PoolItem],
    judge: Judge,
    stop: threading.Event | None = None,
    on_answer: Callable[[int, int], Any] | None = None,
) -> list[ResponseRecord] | None:
    """Answer ``items`` greedily through ``processor`` (None: unsteered) and judge each answer.

    Args:
        on_answer: called with ``(answers done, len(items))`` after each answer.

    Returns:
        one record per item, or None when ``stop`` was set before all were answered.

    Raises:
        JudgeError: the judge could not decide.
    """
    stop = stop or threading.Event()
    records = []
    for n, item in enumerate(items, start=1):
        if stop.is_set():
            return None
        reply = model.reply(item.question, processor, stop)
        if stop.is_set():
            return None
        verdict = judge.judge(item.question, item.answer, reply.text)
        records.append(
            ResponseRecord(
                item.question, item.answer, reply.text, len(reply.token_ids), verdict.correct, verdict.explanation
            )
        )
        if on_answer is not None:
            on_answer(n, len(items))
    return records


def _evolving_summary(history: Sequence[Mapping[str, Any]], window: int) -> str:
    return "\n".join(f"[iteration {h['iteration']}] {h['summary']}" for h in history[-window:] if h["summary"])


def _bounds_json(settings: EvolutionSettings) -> dict[str, list[float]]:
    return {str(c): list(b) for c, b in sorted(settings.cluster_bounds.items())}


def _check_run_file(run: Path, params: dict[str, Any]) -> None:
    file = run / RUN_FILE
    if not file.exists():
        atomic_write_text(file, json.dumps(params, indent=2) + "\n")
        return
    try:
        before = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvolutionError(f"{file}: unreadable: {exc}") from exc
    changed = sorted(k for k in set(before) | set(params) if before.get(k) != params.get(k))
    if changed:
        detail = "; ".join(f"{k}: {before.get(k)!r} → {params.get(k)!r}" for k in changed)
        raise EvolutionError(
            f"{run} holds a run with other parameters ({detail}); "
            "resume it with the same settings or use another run directory"
        )


def _read_history(run: Path, ids: Sequence[int]) -> list[dict[str, Any]]:
    file = run / HISTORY_FILE
    if not file.exists():
        return []
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
        entries = raw["iterations"]
        history = []
        for n, entry in enumerate(entries):
            if entry["iteration"] != n:
                raise ValueError(f"entry {n} is iteration {entry['iteration']}")
            validate_deltas(entry["deltas"], ids)
            validate_deltas(entry["proposed"], ids)
            float(entry["composite"])
            history.append(entry)
    except (OSError, ValueError, KeyError, TypeError, SteeringError) as exc:
        raise EvolutionError(f"{file}: unreadable history: {exc}") from exc
    return history


def _read_best(run: Path) -> dict[str, Any] | None:
    file = run / BEST_FILE
    if not file.exists():
        return None
    try:
        evaluation = read_steering(file).evaluation
        return {**evaluation, "composite": float(evaluation["composite"]), "iteration": int(evaluation["iteration"])}
    except (SteeringError, KeyError, TypeError, ValueError) as exc:
        raise EvolutionError(f"{file}: unreadable best deltas: {exc}") from exc


def _write_history(run: Path, history: Sequence[Mapping[str, Any]]) -> None:
    payload = {"schema_version": SCHEMA_VERSION, "iterations": list(history)}
    atomic_write_text(run / HISTORY_FILE, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
