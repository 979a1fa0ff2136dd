"""The pool of questions an evolution run samples its minibatches from.

Two sources:

* a ``.dlm`` document's ``### Q !probe`` pairs (the default); a document without probes gives all of
  its Q/A pairs instead;
* a JSONL file, one ``{"question": str, "answer": str}`` object per line (FinanceBench's rows, for
  example; other keys are ignored, a numeric ``answer`` is taken as its JSON text, blank lines are
  skipped). A malformed line refuses the whole file with its line number: a pool is small and a
  silently shortened one would bias the scores.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from learnerd.store.dlm import ChatRow, Document, training_rows


class PoolError(ValueError):
    """The pool is empty or a JSONL line is not a ``{question, answer}`` object (path and line in the message)."""


@dataclass(frozen=True)
class PoolItem:
    """A question, its reference ``answer``, and ``source``: where it came from (``file:line``, a section)."""

    question: str
    answer: str
    source: str


def pool_from_document(document: Document) -> list[PoolItem]:
    """The document's probe pairs, or every Q/A pair when it has no probe, in document order.

    Raises:
        PoolError: the document has no Q/A pair.
        DocumentError: an instruction section breaks the Q/A grammar.
    """
    pairs = [row for row in training_rows(document) if isinstance(row, ChatRow)]
    chosen = [p for p in pairs if p.probe] or pairs
    if not chosen:
        raise PoolError(f"{document.path or 'the document'} has no ### Q / ### A pairs to evolve steering on")
    return [PoolItem(p.question, p.answer, f"section {p.section_id}") for p in chosen]


def read_pool_jsonl(path: str | os.PathLike[str]) -> list[PoolItem]:
    """Read a JSONL pool (module docstring).

    Raises:
        PoolError: the file is unreadable, a line is not JSON or lacks a non-empty string ``question`` /
            a non-empty ``answer`` (the first such line is named), or there is no row at all.
    """
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PoolError(f"{file}: cannot read the pool: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PoolError(f"{file}: not UTF-8 text: {exc}") from exc
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise PoolError(f"{file}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise PoolError(f"{file}:{number}: expected an object with question and answer, not {type(row).__name__}")
        question, answer = row.get("question"), row.get("answer")
        if isinstance(answer, int | float) and not isinstance(answer, bool):
            answer = json.dumps(answer)
        if not isinstance(question, str) or not question.strip():
            raise PoolError(f'{file}:{number}: "question" must be a non-empty string')
        if not isinstance(answer, str) or not answer.strip():
            raise PoolError(f'{file}:{number}: "answer" must be a non-empty string or a number')
        items.append(PoolItem(question.strip(), answer.strip(), f"{file.name}:{number}"))
    if not items:
        raise PoolError(f"{file}: no rows")
    return items


def pool_sha256(items: Sequence[PoolItem]) -> str:
    """sha256 hex over the questions and answers, in order (a run is tied to its pool)."""
    payload = json.dumps([[i.question, i.answer] for i in items], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
