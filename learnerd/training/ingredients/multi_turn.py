"""Multi-turn rows: conversations chaining several of the document's Q/A pairs, so the adapter answers a
document question at a later turn of a dialogue too, not only as the first (docs/retention.md)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import Field

from learnerd.ml.rows import TrainingRow
from learnerd.training.ingredients import spec

MULTI_TURN_PAIRS = 4
"""Q/A pairs a multi-turn row chains (fewer when the rows have fewer single-turn pairs): as many as the user turns
of the dialogue probe's dialogues (``[evaluation] max_turns``, 4 by default), so the adapter has answered a document
question at every turn the gate judges (docs/benchmarks.md, "Multi-turn rows of four pairs")."""
MULTI_TURN_PREFIX = "multi-turn:"
"""The section id prefix of a multi-turn row (``multi-turn:<n>``)."""


class Options(spec.Options):
    multi_turn_rows: int = Field(0, ge=0, le=10_000)
    """conversations a cycle adds, each chaining 4 of the document's Q/A pairs (dealt with seed), at most one per
    pair (each pair then asked at 3 later turns), the loss on every assistant turn; costs their steps"""


def multi_turn_rows(rows: Sequence[TrainingRow], count: int, *, seed: int) -> list[TrainingRow]:
    """``count`` conversations, at most one per pair, each chaining :data:`MULTI_TURN_PAIRS` of ``rows``' single-turn
    Q/A pairs (user, assistant, user, assistant, ...; the first pair's system message, if any, first); the loss
    covers every assistant turn. Empty when ``rows`` hold fewer than two single-turn pairs (a chain needs two).

    The draw is balanced, not independent: the later turns (2 and on) are dealt from a deck of the pairs shuffled by
    ``random.Random(seed)``, a new shuffle appended when it runs out, the first turns from a second such deck, and a
    pair already in the conversation is passed over for the next card (it stays on top for the next conversation).
    So every pair is asked at a later turn once before any is asked there twice: with ``count * (MULTI_TURN_PAIRS -
    1)`` at least the pairs, each of them at least once, where independent draws leave ``(1 - 3 / n) ** count`` of
    ``n`` pairs never asked after turn 1 (30 % of 100 pairs in 40 conversations). More conversations than pairs would
    ask each pair at a later turn more than :data:`MULTI_TURN_PAIRS` - 1 times, for steps that bought nothing
    measured (docs/retention.md, "Multi-turn rows", has both)."""
    pairs = [r.messages for r in rows if r.messages is not None and sum(m.role == "assistant" for m in r.messages) == 1]
    if len(pairs) < 2 or count <= 0:
        return []
    count = min(count, len(pairs))
    rng = random.Random(seed)
    later, first = _Deck(len(pairs), rng), _Deck(len(pairs), rng)
    size = min(MULTI_TURN_PAIRS, len(pairs))
    out = []
    for n in range(count):
        chain: list[int] = []
        for _ in range(size - 1):
            chain.append(later.deal(chain))
        chosen = [pairs[i] for i in (first.deal(chain), *chain)]
        system = [m for m in chosen[0] if m.role == "system"]
        turns = [m for messages in chosen for m in messages if m.role != "system"]
        out.append(TrainingRow(section_id=f"{MULTI_TURN_PREFIX}{n}", messages=(*system, *turns)))
    return out


class _Deck:
    """Indices ``0..n-1`` dealt in shuffled passes (a new shuffle appended when the cards run out)."""

    def __init__(self, n: int, rng: random.Random) -> None:
        self._n, self._rng = n, rng
        self._cards: list[int] = []

    def deal(self, taken: Sequence[int]) -> int:
        """The first card not in ``taken`` (the cards passed over stay on top, in order)."""
        while True:
            for i, card in enumerate(self._cards):
                if card not in taken:
                    return self._cards.pop(i)
            fresh = list(range(self._n))
            self._rng.shuffle(fresh)
            self._cards.extend(fresh)


def rows(options: Options, cycle: spec.CycleRows) -> spec.Rows:
    """Every epoch: ``multi_turn_rows`` conversations of the cycle's pairs, trained and rehearsed alike."""
    return spec.Rows(multi_turn_rows(cycle.pairs, options.multi_turn_rows, seed=cycle.seed))


INGREDIENT = spec.Ingredient("multi_turn", Options, rows=rows)
