"""A new task made from one of a document's pairs, for training rows whose answer only a quoted example holds.

A task logged seconds ago is answered before any training only if the served adapter copies the retrieved
example that answers it; an adapter trained on its document's pairs alone answers from memory instead, and a
quoted example it never trained on hardly moves it (``benchmarks/bench_freshness.py --after``: 2 of 20 fresh
tasks answered, each with its example quoted). RAFT (Zhang et al. 2024) trains with the *oracle* document quoted;
learnerd's retrieval rows quote a pair the adapter also memorises, so they cannot teach the copy.
:func:`new_task` makes a task the adapter has never seen from one it has: every word of the command (its name and
arguments, not its options) replaced by another — a word of the document's other commands, or a new one of the same
shape — in the request too wherever it occurs there, so the command can only be read from the quoted example, not
recalled or pieced together from the request.
Nothing is downloaded and nothing of an evaluation set is used: the rows come from the document's own pairs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

QUOTES = "'\"`;,()*?[]{}"
"""Characters stripped from a command's word to find the word inside (quotes, globs, separators)."""


def _whole_word(text: str) -> re.Pattern[str]:
    """``text`` as a whole word: not preceded or followed by a letter, digit or underscore."""
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(text)}(?![A-Za-z0-9_])")


def command_words(command: str) -> list[str]:
    """The words of ``command`` a new task replaces: each whitespace-separated word stripped of :data:`QUOTES`
    that is at least 2 characters long, holds a letter or digit and is not an option (``-x``, ``--long``);
    longest first, each once."""
    found: list[str] = []
    for word in command.split():
        core = word.strip(QUOTES)
        if len(core) >= 2 and not core.startswith("-") and any(c.isalnum() for c in core) and core not in found:
            found.append(core)
    return sorted(found, key=len, reverse=True)


def new_shape(text: str, rng: random.Random) -> str:
    """``text`` with each lower-case letter, upper-case letter and digit replaced by a random one of its kind
    (other characters kept: a path stays a path, a file keeps its dots); never ``text`` itself."""
    while True:
        out = "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz")
            if c.islower()
            else rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
            if c.isupper()
            else rng.choice("0123456789")
            if c.isdigit()
            else c
            for c in text
        )
        if out != text:
            return out


def replacement(word: str, vocabulary: Sequence[str], rng: random.Random) -> str:
    """What :func:`new_task` puts for ``word``: a word of letters becomes another word of letters of ``vocabulary``
    (drawn with ``rng``; the words of the document's other commands, so the new command looks like one a person
    runs, and only the quoted example tells it from those the adapter memorised); any other word, or one without
    an alternative, becomes :func:`new_shape` of it."""
    if word.isalpha():
        choices = [w for w in vocabulary if w.isalpha() and w != word]
        if choices:
            return rng.choice(choices)
    return new_shape(word, rng)


def new_task(question: str, command: str, rng: random.Random, vocabulary: Sequence[str] = ()) -> tuple[str, str] | None:
    """``(question, command)`` with every :func:`command_words` word replaced (:func:`replacement`, from
    ``vocabulary``), in both, wherever it occurs as a whole word; None when the command has no such word (nothing
    would be new)."""
    words = command_words(command)
    if not words:
        return None
    for word in words:
        new = replacement(word, vocabulary, rng).replace("\\", "\\\\")  # a literal replacement
        pattern = _whole_word(word)
        question, command = pattern.sub(new, question), pattern.sub(new, command)
    return question, command
