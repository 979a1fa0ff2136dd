"""The sealed holdout: the texts that judge a candidate, which nothing may write into a document or train on.

A candidate is judged on sets it must never have seen: an adapter trained on them would pass by recitation.
They are

* ``answer_retention``'s pool (:func:`~learnerd.eval.probes.retention.general_pool`: its prompts);
* sway's calibration items (``calibration_drift``, :func:`~learnerd.eval.probes.calibration_drift.sway_pack`:
  their prompts; none when ``dlm-sway`` is not installed — a failing probe's ``worst_offenders`` are sway's items
  whatever is installed, and harvest seals them by where they come from);
* ``paraphrase_invariance``'s paraphrases of the document's own questions
  (:func:`~learnerd.eval.probes.paraphrase.paraphrased`): the document trains its questions, never these
  rewordings of them.

Texts are compared by :func:`normalized` (case folded, every run of non-word characters one space, ends
stripped), so ``"What is the capital of France?"`` and ``"what is the capital of france"`` are one text. The
training replay prompts (:func:`learnerd.training.ingredients.replay.replay_prompts`) are disjoint from all of them
(``tests/integration/test_eval_holdout.py`` pins it and scans a cycle's rows).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from learnerd.eval.probes.calibration_drift import sway_pack
from learnerd.eval.probes.common import NotApplicable
from learnerd.eval.probes.paraphrase import paraphrased
from learnerd.eval.probes.retention import general_pool

RETENTION_POOL = "answer_retention's pool"
SWAY_ITEMS = "sway's calibration items"
PARAPHRASES = "paraphrase_invariance's paraphrases"

_NON_WORD = re.compile(r"[\W_]+")


def normalized(text: str) -> str:
    """``text`` case folded, each run of non-word characters (punctuation, whitespace) one space, stripped."""
    return _NON_WORD.sub(" ", text.casefold()).strip()


@dataclass(frozen=True)
class Holdout:
    """The judging texts, :func:`normalized`, each mapped to the set it belongs to (one of
    :data:`RETENTION_POOL`, :data:`SWAY_ITEMS`, :data:`PARAPHRASES`)."""

    texts: Mapping[str, str]

    def judging_set(self, text: str) -> str | None:
        """The set ``text`` belongs to, or None when it judges nothing."""
        return self.texts.get(normalized(text))


def sway_prompts() -> tuple[str, ...]:
    """The prompts of sway's calibration items; none when ``dlm-sway`` is not installed."""
    try:
        return tuple(prompt for prompt, _ in sway_pack().items)
    except NotApplicable:
        return ()


def holdout(questions: Iterable[str] = ()) -> Holdout:
    """The sealed holdout of a document whose Q/A questions are ``questions``: the general pools and the
    paraphrases of those questions."""
    texts: dict[str, str] = {}
    for name, members in (
        (PARAPHRASES, [p for q in questions for p in paraphrased(q)]),
        (SWAY_ITEMS, sway_prompts()),
        (RETENTION_POOL, [item.prompt for item in general_pool()]),
    ):
        texts.update((normalized(text), name) for text in members)
    return Holdout(texts)
