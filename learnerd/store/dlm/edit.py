"""Writing .dlm documents: new documents, probe sections, and the compare-and-swap update.

:func:`update_document` is the only way learnerd changes a document on disk. It reads the file, applies
an edit to the parsed document, and replaces the file only if it still holds the bytes that were read
(:func:`learnerd.store.atomic.replace_if_unchanged`); otherwise it reads the file again and re-applies
the edit, so a person's save that lands while learnerd is working is never clobbered, it is merged. An
edit that changes nothing writes nothing (same bytes, same mtime). learnerd's own writers (the probes
reconciler, ``learnerd harvest``, the evaluation reconciler) also hold an advisory ``flock`` on the
document's directory for the whole read-modify-write, so they never race each other. The one window left
is between the final comparison and rename(2) — microseconds — against a writer that takes no lock.

Nor does learnerd write a document it could not read back: an edit that makes a document larger than
:data:`~learnerd.store.dlm.document.MAX_DOCUMENT_BYTES` raises :class:`DocumentTooLarge` and writes nothing
(the probes reconciler rolls over to a new document long before: :mod:`learnerd.store.routing`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from learnerd.store.atomic import replace_if_unchanged
from learnerd.store.dlm import document as dlm_document
from learnerd.store.dlm.document import Document, Section, harvest_marker, parse_body, parse_bytes, parse_text
from learnerd.store.dlm.errors import DocumentError
from learnerd.store.dlm.frontmatter import CURRENT_DLM_VERSION, new_ulid, render_frontmatter
from learnerd.store.dlm.qa import HEADERS, QAPair, blank_line_free, normalize_turn, question_text, render_qa


class UnrepresentableError(ValueError):
    """A question/answer pair cannot be written as a section that parses back to exactly that pair."""


class ConflictError(RuntimeError):
    """The document kept changing under :func:`update_document` for all of its attempts."""


class DocumentTooLarge(DocumentError):
    """An edit would make a document larger than learnerd parses; nothing was written."""


def new_document(
    base_model: str,
    *,
    prose: str = "",
    training: Mapping[str, Any] | None = None,
    dlm_id: str | None = None,
    path: str | Path | None = None,
) -> Document:
    """A new, valid document: frontmatter with a fresh ULID ``dlm_id``, ``dlm_version`` =
    :data:`~learnerd.store.dlm.frontmatter.CURRENT_DLM_VERSION`, ``base_model`` (a dlm registry key or
    ``hf:org/name``), optional ``training`` keys, then ``prose`` (may be empty). LF line ends.

    Raises:
        DocumentError: the arguments do not make a valid document (e.g. ``lora_r: 0`` in ``training``).
    """
    yaml_text = render_frontmatter(
        dlm_id=dlm_id or new_ulid(), base_model=base_model, dlm_version=CURRENT_DLM_VERSION, training=training
    )
    # the prose ends in a blank line, so sections appended later do not change its section id
    body = "\n" + prose.strip("\n") + "\n\n" if prose.strip() else ""
    return parse_text(f"---\n{yaml_text}---\n{body}", path=path)


def probe_section(question: str, answer: str, *, source: str) -> Section:
    """An ``::instruction::`` section holding one ``### Q !probe`` pair, with the auto-harvest marker
    ``source`` (``"<tag>/<name>"``)::

        ::instruction::
        <!-- dlm-auto-harvest: source="<source>" -->
        ### Q !probe
        <question>

        ### A
        <answer>

    No blank line ends the section: its content is byte for byte what ``dlm harvest`` writes for the
    same pair, so both compute the same section id (and each sees the other's section as already
    present); the next section or learnerd's end guard follows right after it, so the id is the same anywhere.

    ``question`` and ``answer`` are normalized as the grammar reads them (LF line ends, surrounding
    whitespace stripped); the question's blank lines are dropped (:func:`~learnerd.store.dlm.qa.question_text`)
    because the released dlm (0.10.0) ends a question at its first blank line. Nothing is escaped: a pair
    the grammar cannot carry is refused, and the check is exact — the rendered section is parsed back and
    must give one section with exactly this pair. Refused: an empty question or answer; an answer with a
    blank line (the released dlm would end the answer there and refuse the section; learnerd does not
    write what the person did not); a body line that reads as ``### Q`` / ``### A`` or as a fence
    (``::type::`` outside a code block); an odd number of ````` lines (an open code block would swallow
    the next sections); a line break the Q/A parser splits at but the file does not (``\\v``, ``\\f``,
    ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``, ``\\u2029``). Markdown (code blocks, shell commands) is kept.

    Raises:
        UnrepresentableError: the pair cannot be carried (the message says why).
    """
    q, a = question_text(question), normalize_turn(answer)
    if not q or not a:
        raise UnrepresentableError("empty question or answer")
    if not blank_line_free(a):
        raise UnrepresentableError("the answer has a blank line (the released dlm 0.10.0 ends an answer there)")
    for role, text in (("question", q), ("answer", a)):
        header = next((line.strip() for line in text.split("\n") if line.strip() in HEADERS), None)
        if header is not None:
            raise UnrepresentableError(f"the {role} has a line {header!r} that reads as a Q/A header")
    try:
        marker = harvest_marker(source)
    except ValueError as exc:
        raise UnrepresentableError(str(exc)) from None
    pair = QAPair(q, a, probe=True)
    section = Section("instruction", tuple(render_qa([pair])), markers=(marker,))
    try:
        parsed = parse_body("\n".join(section.lines()) + "\n::instruction::\n")
    except DocumentError as exc:
        raise UnrepresentableError(exc.message) from None
    first = parsed[0] if len(parsed) == 2 else None
    if first is None or (first.type, first.body, first.markers) != (section.type, section.body, section.markers):
        raise UnrepresentableError("a line of the question or answer reads as a section fence")
    try:
        pairs = first.qa_pairs()
    except DocumentError as exc:
        raise UnrepresentableError(exc.message) from None
    if pairs != [pair]:
        raise UnrepresentableError(
            "the pair does not parse back to itself (a line reads as ### Q / ### A, or an unusual line break)"
        )
    return section


def probe_section_ids(section: Section) -> frozenset[str]:
    """The ids ``section`` (from :func:`probe_section`) may have in a document: its own, and that of the
    same section in the layout learnerd wrote before it matched ``dlm harvest`` (a final blank line), so a
    pair written by an older learnerd counts as present."""
    return frozenset({section.section_id, replace(section, body=(*section.body, "")).section_id})


@dataclass(frozen=True)
class WriteOutcome:
    """What :func:`update_document` did: ``document`` is what the file now holds, ``written`` whether it
    was replaced (False: the edit changed nothing), ``attempts`` how many reads it took (> 1 after a
    concurrent change)."""

    document: Document
    written: bool
    attempts: int


def update_document(
    path: str | Path,
    edit: Callable[[Document], Document],
    *,
    create: Callable[[], Document] | None = None,
    max_attempts: int = 10,
    before_replace: Callable[[], None] | None = None,
) -> WriteOutcome:
    """Read-modify-write ``path`` with compare-and-swap (see the module docstring).

    Args:
        path: the document.
        edit: maps the document as read to the document wanted; called again on every retry, so it
            must be a pure function of its argument (and of state it reads itself).
        create: makes the document when ``path`` does not exist (then it is written even if ``edit``
            changes nothing); without it a missing file raises FileNotFoundError.
        max_attempts: reads before giving up.
        before_replace: called after the new bytes are computed and before the compare-and-swap — a
            hook for tests that make a concurrent save deterministic.

    Raises:
        FileNotFoundError: ``path`` is missing and there is no ``create``.
        DocumentError: the file (as read on some attempt) is not a valid document.
        DocumentTooLarge: the edited document would be larger than
            :data:`~learnerd.store.dlm.document.MAX_DOCUMENT_BYTES` (nothing is written).
        ConflictError: the file changed under every attempt.
        OSError: reading or writing failed.
    """
    target = Path(path)
    with _directory_lock(target.parent):
        for attempt in range(1, max_attempts + 1):
            try:
                data: bytes | None = target.read_bytes()
            except FileNotFoundError:
                if create is None:
                    raise
                data = None
            if data is None:
                assert create is not None  # a missing file without create was raised above
                current = create()
            else:
                current = parse_bytes(data, path=target)
            wanted = edit(current)
            new = wanted.to_bytes()
            if data is not None and new == data:
                return WriteOutcome(current, False, attempt)
            cap = dlm_document.MAX_DOCUMENT_BYTES
            if len(new) > cap and (data is None or len(new) > len(data)):
                raise DocumentTooLarge(
                    f"the edit would make the document {len(new):,} bytes, over the {cap:,} "
                    "learnerd reads; nothing was written",
                    path=target,
                )
            if before_replace is not None:
                before_replace()
            if replace_if_unchanged(target, new, data):
                return WriteOutcome(wanted, True, attempt)
    raise ConflictError(f"{target}: changed during each of {max_attempts} attempts to update it")


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive advisory flock(2) on ``directory``, held by learnerd's document writers."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
