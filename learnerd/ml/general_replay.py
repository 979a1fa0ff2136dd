"""General replay: the base model's own greedy answers to general prompts, mixed into every training cycle.

GeRe (Zhang et al., "GeRe: Towards Efficient Anti-Forgetting in Continual Learning of LLM via General
Samples Replay", arXiv 2508.04676) keeps an LLM's general abilities through continual fine-tuning by replaying
a small fixed set of general samples. learnerd replays self-distilled ones — no download, no other model's
text: the prompts are :data:`POOL` (``learnerd/ml/packs/replay_prompts.jsonl``, one JSON object a line with
``category`` and ``prompt``; 82 general questions — knowledge, arithmetic, writing, code — none of them an
item of the ``answer_retention`` probe's pool, which a test pins), the answers are the base's greedy replies
(at most :data:`MAX_NEW_TOKENS` new tokens, :func:`learnerd.ml.generate.greedy_replies`).

They are generated once per base and pool and cached as JSON in the model cache (``<state_dir>/models/``,
:func:`cache_path`: keyed by a hash of the base's identity and of the pool file; written atomically), so every
later cycle on that base reads the file. The file is derived data, kept as the evaluation's base answers are
(:mod:`learnerd.eval.base_answers`): one that cannot be read, or that holds another pool, is a miss (logged,
generated again and replaced), and one that cannot be written is logged and skipped; a cache never fails a
cycle. A cycle of ``training.general_replay`` r mixes in
``round(r × document rows)`` replay rows (:func:`replay_rows`: the pool's answers in a seeded order, cycling
when more are asked for than the pool holds), section id ``general-replay:<n>``: single-turn chat rows with
the document's system prompt, whose answer tokens carry the loss (and, with ``training.replay_kl_weight``, a
KL term to the base: :func:`learnerd.ml.lora.train_lora`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.rows import TrainingRow
from learnerd.store.atomic import atomic_write_text

POOL = "packs/replay_prompts.jsonl"
"""The prompt pool's file, relative to the ``learnerd.ml`` package."""
MAX_NEW_TOKENS = 64
"""New tokens of each cached greedy answer at most."""
SECTION_PREFIX = "general-replay:"
"""The section id prefix of a replay row (``general-replay:<pool index>``)."""
CACHE_VERSION = 1

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReplayAnswer:
    """One cached pair: the pool's ``prompt`` and the base's greedy ``answer`` to it."""

    prompt: str
    answer: str


@functools.cache
def pool_text() -> str:
    """The pool file's text (UTF-8)."""
    return resources.files("learnerd.ml").joinpath(POOL).read_text(encoding="utf-8")


def replay_prompts() -> tuple[str, ...]:
    """The pool's prompts, in file order.

    Raises:
        ValueError: a line is not a JSON object with a non-empty ``prompt`` string (file and line named).
    """
    prompts = []
    for number, line in enumerate(pool_text().splitlines(), start=1):
        entry = json.loads(line)
        prompt = entry.get("prompt") if isinstance(entry, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{POOL}:{number}: not an object with a non-empty prompt string")
        prompts.append(prompt)
    return tuple(prompts)


def cache_path(models_dir: Path, base_identity: str, system: str | None = None) -> Path:
    """Where the answers of the base ``base_identity`` to the pool (asked under ``system``, the document's
    system prompt, or none) are cached: ``models_dir/replay-<sha256(identity, system, pool, budget)[:16]>.json``
    (``budget``: :data:`MAX_NEW_TOKENS`)."""
    key = json.dumps([CACHE_VERSION, base_identity, system, pool_text(), MAX_NEW_TOKENS])
    return models_dir / f"replay-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def cached_answers(
    path: Path | None, model: Any, tokenizer: Any, system: str | None = None
) -> tuple[ReplayAnswer, ...]:
    """The base's greedy answers to the pool: read from ``path`` when it holds them, else generated with
    ``model`` (the base: a plain causal LM, or a ``PeftModel`` inside ``disable_adapter()``) and written there
    atomically (``path`` None: generated and not cached). A ``path`` that cannot be read or holds another
    pool is logged (``general_replay.cache_unreadable``) and replaced; one that cannot be written is logged
    (``general_replay.cache_unwritable``) and the answers are returned all the same.

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    prompts = replay_prompts()
    cached = _read_cache(path, prompts) if path is not None else None
    if cached is not None:
        return cached
    from learnerd.ml.generate import chat_turns, greedy_replies

    replies = greedy_replies(
        model, tokenizer, [chat_turns(p, system=system) for p in prompts], max_new_tokens=MAX_NEW_TOKENS
    )
    answers = tuple(ReplayAnswer(p, r.text.strip()) for p, r in zip(prompts, replies, strict=True))
    if path is not None:
        payload = {"version": CACHE_VERSION, "system": system, "answers": [a.__dict__ for a in answers]}
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
        except OSError as exc:
            log.warning("general_replay.cache_unwritable", path=str(path), error=str(exc))
    return answers


def _read_cache(path: Path, prompts: tuple[str, ...]) -> tuple[ReplayAnswer, ...] | None:
    """The answers cached at ``path`` for ``prompts``; None when there is no file, or (logged) when it cannot
    be read or was written for another pool."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        answers = tuple(ReplayAnswer(a["prompt"], a["answer"]) for a in raw["answers"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("general_replay.cache_unreadable", path=str(path), error=str(exc))
        return None
    if tuple(a.prompt for a in answers) != prompts:
        log.warning("general_replay.cache_unreadable", path=str(path), error="written for another prompt pool")
        return None
    return answers


def replay_count(ratio: float, document_rows: int) -> int:
    """Replay rows for a cycle of ``document_rows`` rows at ``ratio`` replay rows per document row."""
    return round(ratio * document_rows)


def replay_rows(
    answers: Sequence[ReplayAnswer], count: int, *, seed: int, system: str | None = None
) -> list[TrainingRow]:
    """``count`` replay rows from ``answers``: a ``random.Random(seed)`` permutation of them, cycled; an
    empty answer (the base said nothing) is skipped."""
    usable = [(i, a) for i, a in enumerate(answers) if a.answer]
    if not usable or count <= 0:
        return []
    order = random.Random(seed).sample(usable, len(usable))
    picked = [order[n % len(order)] for n in range(count)]
    return [TrainingRow.chat(f"{SECTION_PREFIX}{i}", a.prompt, a.answer, system=system) for i, a in picked]


def is_replay(section_id: str) -> bool:
    """Whether a row's ``section_id`` is a general replay row's."""
    return section_id.startswith(SECTION_PREFIX)
