"""General replay: the base model's own greedy answers to general prompts, mixed into every training cycle so
the adapter keeps what the base could do (GeRe: Zhang et al., "GeRe: Towards Efficient Anti-Forgetting in
Continual Learning of LLM via General Samples Replay", arXiv 2508.04676; docs/retention.md).

The prompts are :data:`POOL` (one JSON object a line with ``category`` and ``prompt``, none of them an item of
the ``answer_retention`` probe's pool); a cycle draws distinct prompts in an order seeded with the block's seed
(:func:`drawn_prompts`) and trains the base's answers to them as chat rows under the document's system prompt,
section id ``general-replay:<pool index>`` (:func:`replay_rows`). The answers are generated for the prompts drawn
and cached in the model cache (:func:`cache_path`; written atomically). The cache is derived data: one that cannot
be read is a miss (logged, generated again and replaced), one that cannot be written is logged and skipped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import structlog
from pydantic import Field

from learnerd.ml.rows import TrainingRow
from learnerd.store.atomic import write_cache_file
from learnerd.training.ingredients import spec

POOL = "packs/replay_prompts.jsonl"
"""The prompt pool's file, relative to this package."""
MAX_NEW_TOKENS = 64
"""New tokens of each cached greedy answer at most."""
SECTION_PREFIX = "general-replay:"
"""The section id prefix of a replay row (``general-replay:<pool index>``)."""
CACHE_VERSION = 2

log = structlog.get_logger(__name__)


class Options(spec.Options):
    general_replay: float = Field(0.0, ge=0.0, le=10.0)
    """replay rows per document row: the base's own greedy answers to general prompts, a distinct prompt for
    each row while the pool lasts; a cycle takes (1 + r) times the steps, and the base answers each prompt drawn
    for the first time (cached)"""


@dataclass(frozen=True)
class ReplayAnswer:
    """One cached pair: the pool's ``prompt`` and the base's greedy ``answer`` to it."""

    prompt: str
    answer: str


@functools.cache
def replay_prompts() -> tuple[str, ...]:
    """The pool's prompts, in file order (the file is read once).

    Raises:
        ValueError: a line is not a JSON object with a non-empty ``prompt`` string (file and line named).
    """
    text = resources.files(__package__).joinpath(POOL).read_text(encoding="utf-8")
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = json.loads(line)
        prompt = entry.get("prompt") if isinstance(entry, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{POOL}:{number}: not an object with a non-empty prompt string")
        prompts.append(prompt)
    return tuple(prompts)


def cache_path(models_dir: Path, base_identity: str, system: str | None = None) -> Path:
    """Where the answers of the base ``base_identity`` to the pool's prompts (asked under ``system``, the
    document's system prompt, or none) are cached:
    ``models_dir/replay-<sha256(version, identity, system, budget)[:16]>.json`` (``budget``:
    :data:`MAX_NEW_TOKENS`)."""
    key = json.dumps([CACHE_VERSION, base_identity, system, MAX_NEW_TOKENS])
    return models_dir / f"replay-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


CORE_PROMPTS = 82
"""The pool's first prompts, its core: the 82 composed before 2026-11-27 to cover the four kinds evenly
(28 knowledge, 18 each arithmetic, writing and code); a cycle draws all of them before any of the others."""


def drawn_prompts(count: int, seed: int) -> tuple[int, ...]:
    """The pool indices a cycle of ``count`` replay rows rehearses: the first ``min(count, pool size)`` of an
    order seeded with ``seed`` (``random.Random``) that permutes the :data:`CORE_PROMPTS` first and the rest of
    the pool (:func:`replay_prompts`) after them — a document of up to about 20 rows at the recipe's ratio
    rehearses the core, a larger one the core and as many of the others as it needs (docs/retention.md)."""
    size = len(replay_prompts())
    core = min(CORE_PROMPTS, size)
    rng = random.Random(seed)
    order = rng.sample(range(core), core) + rng.sample(range(core, size), size - core)
    return tuple(order[: max(0, min(count, size))])


def cached_answers(
    path: Path | None,
    model: Any,
    tokenizer: Any,
    indices: Sequence[int],
    system: str | None = None,
    on_answers: Callable[[int, int], None] | None = None,
) -> tuple[ReplayAnswer, ...]:
    """The base's greedy answers to the pool's prompts ``indices`` (:func:`drawn_prompts`), in that order:
    read from ``path`` for the prompts it holds, generated with ``model`` (the base: a plain causal LM, or a
    ``PeftModel`` inside ``disable_adapter()``) for the others (``on_answers(done, missing)`` after each batch),
    which are then added to ``path`` atomically
    (``path`` None: all generated, nothing cached). A ``path`` that cannot be read is logged
    (``general_replay.cache_unreadable``) and replaced; one that cannot be written is logged
    (``general_replay.cache_unwritable``) and the answers are returned all the same.

    Raises:
        IndexError: an index is outside the pool.
        RowEncodingError: the tokenizer has no chat template.
    """
    prompts = replay_prompts()
    wanted = [prompts[i] for i in indices]
    known = _read_cache(path, system) if path is not None else {}
    missing = list(dict.fromkeys(p for p in wanted if p not in known))
    if missing:
        from learnerd.ml.generate import chat_turns, greedy_replies

        def progress(done: int) -> None:
            if on_answers is not None:
                on_answers(done, len(missing))

        progress(0)
        replies = greedy_replies(
            model,
            tokenizer,
            [chat_turns(p, system=system) for p in missing],
            max_new_tokens=MAX_NEW_TOKENS,
            on_batch=progress,
        )
        known.update({p: r.text.strip() for p, r in zip(missing, replies, strict=True)})
        if path is not None:
            _write_cache(path, system, {p: known[p] for p in prompts if p in known})
    return tuple(ReplayAnswer(p, known[p]) for p in wanted)


def _read_cache(path: Path, system: str | None) -> dict[str, str]:
    """The answers cached at ``path``, by prompt; empty when there is no file, or (logged) when it cannot be
    read or was written for another system prompt or cache version."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw["version"] != CACHE_VERSION or raw["system"] != system:
            raise ValueError(f"written as version {raw['version']} for system prompt {raw['system']!r}")
        answers = raw["answers"]
        if not isinstance(answers, dict) or not all(isinstance(a, str) for a in answers.values()):
            raise TypeError("answers is not an object of strings")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("general_replay.cache_unreadable", path=str(path), error=str(exc))
        return {}
    return dict(answers)


def _write_cache(path: Path, system: str | None, answers: dict[str, str]) -> None:
    payload = {"version": CACHE_VERSION, "system": system, "answers": answers}
    text = json.dumps(payload, ensure_ascii=False, indent=1) + "\n"
    write_cache_file(path, text.encode("utf-8"), "general_replay.cache_unwritable")


def replay_count(ratio: float, document_rows: int) -> int:
    """Replay rows for a cycle of ``document_rows`` rows at ``ratio`` replay rows per document row."""
    return round(ratio * document_rows)


def replay_rows(
    indices: Sequence[int], answers: Sequence[ReplayAnswer], count: int, *, system: str | None = None
) -> list[TrainingRow]:
    """``count`` replay rows: the ``answers`` to the pool's prompts ``indices`` (:func:`drawn_prompts`,
    :func:`cached_answers`), in their order, cycled; an empty answer (the base said nothing) is skipped."""
    usable = [(i, a) for i, a in zip(indices, answers, strict=True) if a.answer]
    if not usable or count <= 0:
        return []
    picked = [usable[n % len(usable)] for n in range(count)]
    return [TrainingRow.chat(f"{SECTION_PREFIX}{i}", a.prompt, a.answer, system=system) for i, a in picked]


def is_replay(section_id: str) -> bool:
    """Whether a row's ``section_id`` is a general replay row's."""
    return section_id.startswith(SECTION_PREFIX)


def rows(options: Options, cycle: spec.CycleRows) -> spec.Rows:
    """Every epoch: ``round(general_replay × n)`` replay rows, ``n`` the document rows an epoch trains (those
    rehearsed included), the answers read from or added to ``cycle.replay_cache``."""
    count = replay_count(options.general_replay, len(cycle.rows) + cycle.rehearsed_per_epoch)
    if not count:
        return spec.Rows([])
    drawn = drawn_prompts(count, cycle.seed)
    answers = cached_answers(cycle.replay_cache, cycle.model, cycle.tokenizer, drawn, cycle.system, cycle.on_answers)
    return spec.Rows(replay_rows(drawn, answers, count, system=cycle.system))


INGREDIENT = spec.Ingredient("general_replay", Options, rows=rows)
