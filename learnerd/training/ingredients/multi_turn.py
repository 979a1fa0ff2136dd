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
    """conversations a cycle adds, each chaining 4 of the document's Q/A pairs (drawn with seed), the loss on
    every assistant turn; costs their steps"""


def multi_turn_rows(rows: Sequence[TrainingRow], count: int, *, seed: int) -> list[TrainingRow]:
    """``count`` conversations, each chaining :data:`MULTI_TURN_PAIRS` of ``rows``' single-turn Q/A pairs
    (user, assistant, user, assistant, ...; the first pair's system message, if any, first), the pairs of
    each drawn without replacement by ``random.Random(seed)``; the loss covers every assistant turn. Empty
    when ``rows`` hold fewer than two single-turn pairs (a chain needs two)."""
    pairs = [r.messages for r in rows if r.messages is not None and sum(m.role == "assistant" for m in r.messages) == 1]
    if len(pairs) < 2 or count <= 0:
        return []
    rng = random.Random(seed)
    out = []
    for n in range(count):
        chosen = rng.sample(pairs, min(MULTI_TURN_PAIRS, len(pairs)))
        system = [m for m in chosen[0] if m.role == "system"]
        turns = [m for messages in chosen for m in messages if m.role != "system"]
        out.append(TrainingRow(section_id=f"{MULTI_TURN_PREFIX}{n}", messages=(*system, *turns)))
    return out


def rows(options: Options, cycle: spec.CycleRows) -> spec.Rows:
    """Every epoch: ``multi_turn_rows`` conversations of the cycle's pairs, trained and rehearsed alike."""
    return spec.Rows(multi_turn_rows(cycle.pairs, options.multi_turn_rows, seed=cycle.seed))


INGREDIENT = spec.Ingredient("multi_turn", Options, rows=rows)
