"""A request asked in other words: rewrites of a document's question for training, made without a model or a
download.

A person who logged a task asks for it again in other words ("How do I …?", "I need to …", a word left out); an
adapter trained only on the logged wording answers that wording far better than others. Paraphrase augmentation
(PAFT, prompt-agnostic fine-tuning, 2025) trains the same answer under other wordings. :func:`rewrite_question`
makes them from request templates — the framings people put around an imperative task — and drops articles at
random; it never changes the task's own words, so a rewrite asks for exactly what the pair answers. The templates
are generic English request forms, written for learnerd; they are not drawn from any evaluation set.

Only the last line of a question is rewritten: a question built from several cells (a tldr page's heading, its
summary, then the task) keeps its context lines.
"""

from __future__ import annotations

import random

MAX_REWRITES = 8
"""Rewrites of one question at most (the templates are :data:`TEMPLATES`; more would repeat them)."""

TEMPLATES: tuple[str, ...] = (
    "How do I {task}?",
    "How can I {task}?",
    "I need to {task}.",
    "I want to {task}.",
    "Please {task}.",
    "Can you show me how to {task}?",
    "What is the command to {task}?",
    "Which command lets me {task}?",
    "Shell command to {task}",
    "{Task}, please",
)
"""Request framings of an imperative task (``{task}``: lower-cased first letter; ``{Task}``: as written)."""

ARTICLES = frozenset({"a", "an", "the"})
"""Words a rewrite may leave out (each with probability :data:`DROP_PROBABILITY`)."""
DROP_PROBABILITY = 0.5


def rewrite_question(question: str, count: int, *, seed: str | int) -> list[str]:
    """``count`` (at most :data:`MAX_REWRITES`) distinct rewrites of ``question``'s last line, other lines kept.

    Each puts the task (the last line without its closing punctuation) into a different template of
    :data:`TEMPLATES`, drawn with ``random.Random(seed)``, and leaves each article out with probability
    :data:`DROP_PROBABILITY`. A rewrite equal to the question or to an earlier rewrite is not returned, so fewer than
    ``count`` may come back (an empty question gives none).

    Args:
        question: the pair's question (the user turn), one or more lines.
        count: rewrites wanted (0 gives none).
        seed: any value ``random.Random`` accepts (a pair's own seed keeps its rewrites stable across cycles).
    """
    *context, last = question.rstrip().split("\n") or [""]
    task = last.strip().rstrip(".?!:;").strip()
    if not task or count <= 0:
        return []
    rng = random.Random(seed)
    out: list[str] = []
    for template in rng.sample(TEMPLATES, min(count, MAX_REWRITES, len(TEMPLATES))):
        words = [w for w in task.split() if w.lower() not in ARTICLES or rng.random() >= DROP_PROBABILITY]
        kept = " ".join(words) or task
        lowered = kept[0].lower() + kept[1:] if not kept[:2].isupper() else kept
        text = "\n".join([*context, template.format(task=lowered, Task=kept)])
        if text != question and text not in out:
            out.append(text)
    return out
