"""learnerd's own answers as an input: each answer served (the OpenAI-compatible endpoint, ``learnerd
generate``) is redacted, then recorded as a served block and an open suggestion in one transaction
(:mod:`learnerd.store.suggestions`), so that a later execution of it — read by any log reader — gives the
adapter version that answered its outcome.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections import Counter

from learnerd.privacy.redact import Redactor
from learnerd.store import suggestions
from learnerd.store.db import transaction
from learnerd.store.suggestions import ServedAnswer


def redacted(answer: ServedAnswer, redactor: Redactor, kinds: Counter[str] | None = None) -> ServedAnswer:
    """``answer`` with the secrets of its turns, its text and its session replaced by placeholders
    (:meth:`~learnerd.privacy.redact.Redactor.redact`); each placeholder put in is counted into ``kinds``."""
    kinds = kinds if kinds is not None else Counter()

    def clean(text: str) -> str:
        redaction = redactor.redact(text)
        kinds.update(redaction.kinds)
        return redaction.text

    return dataclasses.replace(
        answer,
        turns=tuple((role, clean(text)) for role, text in answer.turns),
        answer=clean(answer.answer),
        session=clean(answer.session) if answer.session is not None else None,
    )


def record_answer(
    conn: sqlite3.Connection, answer: ServedAnswer, redactor: Redactor, now: float, kinds: Counter[str] | None = None
) -> str:
    """Redact ``answer`` (:func:`redacted`), then record it in one transaction
    (:func:`learnerd.store.suggestions.record`); returns the served block's id.

    Raises:
        sqlite3.Error, psycopg.Error: the database failed; nothing was written.
    """
    clean = redacted(answer, redactor, kinds)
    with transaction(conn):
        return suggestions.record(conn, clean, now)
