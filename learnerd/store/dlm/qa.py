"""The Q/A grammar of ``::instruction::`` sections, as dlm's ``src/dlm/data/instruction_parser.py`` reads it.

::

    ### Q            (or ``### Q !probe``: the pair is also a probe / regression check)
    <question: one or more lines>
    ### A
    <answer: one or more lines, blank lines and code blocks included>
    ### Q
    ...

A header is a line whose stripped text is exactly ``### Q``, ``### Q !probe`` or ``### A``; a body runs
to the next header or the end of the section and is returned with ``str.strip()`` applied, so leading
and trailing whitespace of a question or answer is not representable. Code blocks do *not* protect a
header-looking line inside an answer (dlm's parser does not track them). Errors: text before the first
``### Q``, an empty question or answer, a ``### Q`` with no ``### A`` (at the end of the section or
because two ``### Q`` come in a row), and a section with no pair at all.

The released dlm (``document-language-model`` 0.10.0 on PyPI, ``dlm/data/instruction_parser.py``) is
stricter: a body also ends at its first blank (whitespace-only) line, and after a question's blank line the
next line must be ``### A``. This module *reads* the repository's grammar (a person's document with blank
lines in an answer still trains here); what learnerd *writes* (:func:`render_qa`, with turns from
:func:`question_text` and checked by :func:`blank_line_free`) is accepted by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from learnerd.store.dlm.errors import DocumentError

Q_HEADER = "### Q"
PROBE_HEADER = "### Q !probe"
A_HEADER = "### A"
HEADERS = frozenset({Q_HEADER, PROBE_HEADER, A_HEADER})
"""The lines (stripped) the grammar reads as headers."""


@dataclass(frozen=True)
class QAPair:
    """One instruction turn: ``question`` (the user turn) and ``answer`` (the assistant turn), both stripped."""

    question: str
    answer: str
    probe: bool = False


def parse_qa(lines: Sequence[str], *, path: str | Path | None = None, first_line: int = 1) -> list[QAPair]:
    """The Q/A pairs of an instruction section body.

    Args:
        lines: the section's content lines (fence and marker lines excluded), no line ends.
        path: the file, for error messages.
        first_line: the file line number of ``lines[0]``.

    Raises:
        DocumentError: the body breaks the grammar; ``line`` is that of the offending header (the
            ``### Q`` of an empty or unanswered question, the ``### A`` of an empty answer, the second
            ``### Q`` of two in a row) or line, or the section's first body line when it has no pair.
    """
    pairs: list[QAPair] = []
    i, n = 0, len(lines)

    def fail(message: str, at: int) -> DocumentError:
        return DocumentError(message, path=path, line=first_line + at)

    def skip_blank(j: int) -> int:
        while j < n and not lines[j].strip():
            j += 1
        return j

    def read_body(j: int) -> tuple[str, int]:
        start = j
        while j < n and lines[j].strip() not in HEADERS:
            j += 1
        return "\n".join(lines[start:j]).strip(), j

    i = skip_blank(i)
    while i < n:
        q_at, header = i, lines[i].strip()
        if header not in (Q_HEADER, PROBE_HEADER):
            raise fail(f"expected `{Q_HEADER}` alone on its line, got {lines[i]!r}", i)
        question, i = read_body(i + 1)
        if not question:
            raise fail("### Q body is empty", q_at)
        if i >= n:
            raise fail(f"### Q without a matching `{A_HEADER}` at the end of the section", q_at)
        if lines[i].strip() != A_HEADER:
            raise fail(f"### Q must be followed by `{A_HEADER}`, got {lines[i]!r} (two questions in a row?)", i)
        a_at = i
        answer, i = read_body(i + 1)
        if not answer:
            raise fail("### A body is empty", a_at)
        pairs.append(QAPair(question, answer, probe=header == PROBE_HEADER))
        i = skip_blank(i)
    if not pairs:
        raise fail("instruction section has no ### Q / ### A pairs", 0)
    return pairs


def normalize_turn(text: str) -> str:
    """What the grammar can represent of ``text``: line ends made LF, surrounding whitespace stripped."""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def question_text(text: str) -> str:
    """A question as learnerd writes it: :func:`normalize_turn`, then every blank (whitespace-only) line
    dropped, so the released dlm's parser does not end the question early (markdown paragraphs become
    consecutive lines; the model conditions on the question, it never has to produce it)."""
    return "\n".join(line for line in normalize_turn(text).split("\n") if line.strip())


def blank_line_free(text: str) -> bool:
    """True when no line of ``text`` (split at LF) is blank: the released dlm (0.10.0) reads the body whole."""
    return all(line.strip() for line in text.split("\n"))


def render_qa(pairs: Sequence[QAPair]) -> list[str]:
    """Body lines for ``pairs`` in the layout of ``dlm harvest`` (``dlm/harvest/diff.py``): header,
    question, blank line, ``### A``, answer; a blank line between two pairs and none after the last, so
    a section holding one probe pair has the content, hence the section id, dlm gives the same pair.

    The caller must check the result parses back (a body line may look like a header or a fence) and
    that the bodies have no blank line; :func:`learnerd.store.dlm.edit.probe_section` does.
    """
    lines: list[str] = []
    for i, pair in enumerate(pairs):
        lines += [""] if i else []
        lines += [PROBE_HEADER if pair.probe else Q_HEADER, *pair.question.split("\n"), ""]
        lines += [A_HEADER, *pair.answer.split("\n")]
    return lines
