"""Parse and serialize .dlm documents, byte-compatible with dlm (``src/dlm/doc/parser.py`` at schema 15).

A document is YAML frontmatter between two ``---`` lines, then a body of sections::

    ---
    dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS
    base_model: smollm2-135m
    ---

    # Prose needs no fence.

    ::instruction::
    <!-- dlm-auto-harvest: source="learnerd/<example id>" -->
    ### Q !probe
    ...

A section starts at a fence line (``::type::``, ``::type#adapter::``, or ``::image path="..." alt="..."::``
/ ``::audio path="..." transcript="..."::``) and ends at the next fence or the end of the file; there is
no closing fence. Lines inside a triple-backtick code block are never fences. The prose before the first
fence is a section too; a prose section that is only whitespace is not (dlm drops it). dlm strips one blank
line after the frontmatter and one final newline before splitting the body into lines.

Auto-written ``::instruction::`` / ``::preference::`` sections carry marker lines right after the fence
(``<!-- dlm-auto-harvest: source="<tag>/<name>" -->``, and dlm's ``dlm-auto-synth`` / ``dlm-auto-mined``
provenance markers); markers are metadata, not content. A section's id is
``sha256(type + "\\n" + content)[:16]`` (hex) over its content without fence and markers, the lines
joined by LF (dlm reads CRLF and CR as LF, strips a BOM); media sections (image, audio) hash their
``path`` attribute instead, as dlm does before their blob is ingested. These ids are the ones sway reports
in ``section_internalization`` evidence.

A person's text appended at the end of a document falls, by this grammar, inside its last section. So
learnerd never leaves one of its auto-written sections last: after each edit that writes auto sections, a
document whose last section is one ends with an empty ``::prose::`` fence (the *end guard*; dlm reads
whitespace-only prose as no section at all), and text written after it is prose. New auto sections go
before an end guard nothing has been written after. For a document written before the guard existed,
an auto section being replaced whose body is what learnerd writes for it followed by more lines keeps
those lines: they become a ``::prose::`` section right after it.

Round trip: a :class:`Document` remembers the exact text of every part it did not change, so
``parse_bytes(b).to_bytes() == b`` for every document that parses, whatever its line ends or BOM; new
or edited sections use the document's own line end (that of its first line).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from learnerd.store.dlm.errors import DocumentError
from learnerd.store.dlm.frontmatter import Frontmatter, parse_frontmatter
from learnerd.store.dlm.qa import QAPair, parse_qa

SECTION_TYPES = ("prose", "instruction", "preference", "image", "audio")
MEDIA_TYPES = ("image", "audio")

HARVEST_MARKER_RE = re.compile(r'^<!-- dlm-auto-harvest: source="([^"]*)" -->$')
_MINED_MARKER_RE = re.compile(r"^<!-- dlm-auto-mined:(.*) -->$")
_SYNTH_MARKER_RE = re.compile(r"^<!-- dlm-auto-synth:(.*) -->$")
_MARKER_BLOB_RE = re.compile(r'(?:\s+[a-z][a-z0-9_]*="[^"\n]*")+')
_MINED_KEYS = frozenset({"judge_name", "judge_score_chosen", "judge_score_rejected", "mined_at", "mined_run_id"})
_SYNTH_KEYS = frozenset({"synth_teacher", "synth_strategy", "synth_at", "source_section_id"})

_FENCE_RE = re.compile(r"^::([A-Za-z0-9_#-]+)::$")
_ATTR_FENCE_RE = re.compile(r'^::([a-z][a-z0-9_]*)((?:\s+[a-z][a-z0-9_]*="[^"\n]*")+)\s*::$')
_ATTR_KV_RE = re.compile(r'([a-z][a-z0-9_]*)="([^"\n]*)"')
_ADAPTER_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# type -> (required, allowed) fence attributes
_ATTR_SPEC = {
    "image": (frozenset({"path"}), frozenset({"path", "alt"})),
    "audio": (frozenset({"path", "transcript"}), frozenset({"path", "transcript"})),
}
_LINE_END_RE = re.compile(r"\r\n|\r|\n")
_HEADER_RE = re.compile(r"^### (Q|A|Q !probe|Prompt|Chosen|Rejected)$")


def harvest_marker(source: str) -> str:
    """The marker line ``<!-- dlm-auto-harvest: source="<source>" -->``.

    Raises:
        ValueError: ``source`` contains a double quote or a line break (the marker grammar has no escape).
    """
    if '"' in source or _LINE_END_RE.search(source):
        raise ValueError(f"a harvest source cannot contain a double quote or a line break: {source!r}")
    return f'<!-- dlm-auto-harvest: source="{source}" -->'


@dataclass(frozen=True)
class Section:
    """One section of a document.

    Attributes:
        type: one of :data:`SECTION_TYPES`.
        body: the content lines (after the fence and marker lines), without line ends.
        adapter: the ``#name`` of a fence like ``::instruction#tone::``, or None.
        attrs: the attributes of a media fence, in order, as ``(key, value)`` pairs.
        markers: the provenance marker lines between the fence and the body (harvest, synth, mined).
        fenced: False only for the prose before the first fence (it has no fence line).
        start_line: the file line of the fence (or of the first prose line); 0 for a section built in memory.
    """

    type: str
    body: tuple[str, ...] = ()
    adapter: str | None = None
    attrs: tuple[tuple[str, str], ...] = ()
    markers: tuple[str, ...] = ()
    fenced: bool = True
    start_line: int = 0

    @property
    def content(self) -> str:
        """The body lines joined by LF: what the section id and the training rows are made of."""
        return "\n".join(self.body)

    @property
    def section_id(self) -> str:
        """dlm's 16-hex-digit content id (see the module docstring)."""
        media = self.type in MEDIA_TYPES
        hashed = dict(self.attrs).get("path", "") if media else self.content.removeprefix("\ufeff")
        return hashlib.sha256(f"{self.type}\n{hashed}".encode()).hexdigest()[:16]

    @property
    def harvest_source(self) -> str | None:
        """The ``source`` of the section's auto-harvest marker (the last one if several), or None."""
        found = None
        for line in self.markers:
            m = HARVEST_MARKER_RE.match(line)
            if m:
                found = m.group(1)
        return found

    @property
    def summary(self) -> str:
        """The section's first line for reports: its first non-blank content line that is not a
        ``### Q`` / ``### A`` style header (for an instruction section, the first question), stripped."""
        return next((line.strip() for line in self.body if line.strip() and not _HEADER_RE.match(line.strip())), "")

    @property
    def fence_line(self) -> str | None:
        """The fence line as it is written, or None for unfenced prose."""
        if not self.fenced:
            return None
        if self.attrs:
            return f"::{self.type} " + " ".join(f'{k}="{v}"' for k, v in self.attrs) + "::"
        return f"::{self.type}#{self.adapter}::" if self.adapter else f"::{self.type}::"

    def lines(self) -> list[str]:
        """Every line of the section as written: fence, markers, body."""
        fence = self.fence_line
        return ([fence] if fence is not None else []) + list(self.markers) + list(self.body)

    def qa_pairs(self, *, path: str | Path | None = None) -> list[QAPair]:
        """The Q/A pairs of an ``::instruction::`` section (see :mod:`learnerd.store.dlm.qa`).

        Raises:
            DocumentError: the section is not an instruction section, or breaks the Q/A grammar (the
                line is the file line when the section was read from a file).
        """
        if self.type != "instruction":
            raise DocumentError(f"a {self.type} section has no Q/A pairs", path=path, line=self.start_line)
        first = self.start_line + 1 + len(self.markers) if self.start_line else 1
        # dlm's Q/A parser splits with str.splitlines(), which also breaks at \v, \f, \x1c-\x1e, \x85, \u2028/9.
        return parse_qa(self.content.splitlines(), path=path, first_line=first)


@dataclass(frozen=True)
class _Chunk:
    """A run of body lines: a section, or whitespace-only prose that dlm ignores (``visible=False``).
    ``source`` is its exact original text, line ends included; None when it must be rendered."""

    section: Section
    source: str | None
    visible: bool

    def text(self, newline: str) -> str:
        if self.source is not None:
            return self.source
        return "".join(line + newline for line in self.section.lines())


@dataclass(frozen=True)
class Document:
    """A parsed .dlm document: frontmatter, sections, and the exact text of what learnerd did not change.

    Build one with :func:`parse_bytes`, :func:`parse_text`, :func:`read_document` or
    :func:`learnerd.store.dlm.edit.new_document`; edits return a new Document.
    """

    frontmatter: Frontmatter
    path: Path | None
    newline: str
    _head: str = field(repr=False)
    _chunks: tuple[_Chunk, ...] = field(repr=False)

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections dlm sees, in order (whitespace-only prose is not one)."""
        return tuple(c.section for c in self._chunks if c.visible)

    def auto_sections(self, source_prefix: str = "") -> tuple[Section, ...]:
        """Sections with an auto-harvest marker whose source starts with ``source_prefix``."""
        return tuple(
            s for s in self.sections if s.harvest_source is not None and s.harvest_source.startswith(source_prefix)
        )

    def to_text(self) -> str:
        return self._head + "".join(c.text(self.newline) for c in self._chunks)

    def to_bytes(self) -> bytes:
        """The document as UTF-8 bytes: identical to what was parsed, for every part not edited."""
        return self.to_text().encode("utf-8")

    # -- edits (each returns a new Document) ------------------------------------------------------

    def append_section(self, section: Section) -> Document:
        """``section`` added at the end of the document (before an end guard nothing follows; an auto
        section gets one after it)."""
        chunks = list(self._chunks)
        guard = chunks.pop() if chunks and _is_end_guard(chunks[-1]) else None
        chunks.append(_Chunk(section, None, True))
        return self._with_chunks(_guard_end([*chunks, guard] if guard is not None else chunks))

    def upsert_auto_section(self, section: Section) -> Document:
        """Replace the section carrying ``section``'s harvest source in place (dropping any duplicate of
        it), or append ``section`` when there is none. Other sections are not touched.

        Raises:
            ValueError: ``section`` has no auto-harvest marker.
        """
        source = section.harvest_source
        if source is None:
            raise ValueError("upsert_auto_section needs a section with an auto-harvest marker")
        return self._merge_auto({source: section}, remove=lambda _: False, same=_same_section)

    def sync_auto_sections(
        self,
        source_prefix: str,
        wanted: Mapping[str, Section],
        same: Callable[[Section, Section], bool] | None = None,
    ) -> Document:
        """Make the auto-written sections whose source starts with ``source_prefix`` equal to ``wanted``
        (harvest source -> section), in one pass: a wanted source already present keeps its place (and
        its bytes, when ``same(present, wanted)``; the default compares type, adapter, markers and body),
        duplicates of it and sources not wanted are removed, new ones are appended in ``wanted``'s order.
        Hand-written sections and other sources' sections are not touched.
        """
        return self._merge_auto(wanted, remove=lambda s: s.startswith(source_prefix), same=same or _same_section)

    def _merge_auto(
        self, wanted: Mapping[str, Section], remove: Callable[[str], bool], same: Callable[[Section, Section], bool]
    ) -> Document:
        chunks: list[_Chunk] = []
        placed: set[str] = set()
        for c in self._chunks:
            source = c.section.harvest_source if c.visible else None
            if source is None or (source not in wanted and not remove(source)):
                chunks.append(c)
            elif source in wanted and source not in placed:
                placed.add(source)
                if same(c.section, wanted[source]):
                    chunks.append(c)
                    continue
                chunks.append(_Chunk(wanted[source], None, True))
                appended = _appended_lines(c.section, wanted[source])
                if appended:  # a person's text written after learnerd's section: kept, as prose
                    chunks.append(_Chunk(Section("prose", appended), None, True))
        guard = chunks.pop() if chunks and _is_end_guard(chunks[-1]) else None
        chunks += [_Chunk(s, None, True) for source, s in wanted.items() if source not in placed]
        if guard is not None:
            chunks.append(guard)
        return self._with_chunks(_guard_end(chunks))

    def remove_sections(self, predicate: Callable[[Section], bool]) -> Document:
        """Every section for which ``predicate`` is true removed; the rest byte-identical (an end guard
        that followed a removed auto section and now follows none goes with it)."""
        chunks = [c for c in self._chunks if not (c.visible and predicate(c.section))]
        old = self._chunks
        if (
            len(old) >= 2
            and _is_end_guard(old[-1])
            and old[-2].section.harvest_source is not None
            and (len(chunks) < 2 or chunks[-2] is not old[-2])
        ):
            chunks = _guard_end(chunks[:-1])
        return self._with_chunks(chunks)

    def remove_auto_sections(self, source: str) -> Document:
        """Every section whose harvest source is exactly ``source`` removed."""
        return self.remove_sections(lambda s: s.harvest_source == source)

    def strip_auto_sections(self, source_prefix: str = "") -> Document:
        """Every auto-harvested section whose source starts with ``source_prefix`` removed (all by default);
        hand-written sections stay byte-identical."""
        return self.remove_sections(
            lambda s: s.harvest_source is not None and s.harvest_source.startswith(source_prefix)
        )

    def _with_chunks(self, chunks: Sequence[_Chunk]) -> Document:
        head = self._head
        if chunks and not head.endswith(("\n", "\r")):
            head += self.newline
        fixed = []
        for i, c in enumerate(chunks):
            text = c.text(self.newline)
            if i < len(chunks) - 1 and text and not text.endswith(("\n", "\r")):
                c = replace(c, source=text + self.newline)  # a section that ended the file now has a successor
            fixed.append(c)
        return replace(self, _head=head, _chunks=tuple(fixed))


def _is_end_guard(chunk: _Chunk) -> bool:
    """An empty ``::prose::`` section (see the module docstring); not one once text follows its fence."""
    s = chunk.section
    return not chunk.visible and s.type == "prose" and s.fenced and s.adapter is None


def _guard_end(chunks: list[_Chunk]) -> list[_Chunk]:
    """``chunks``, ending with an end guard when the last visible section is an auto-written one."""
    last = next((c for c in reversed(chunks) if c.visible), None)
    if last is None or last.section.harvest_source is None or _is_end_guard(chunks[-1]):
        return chunks
    return [*chunks, _Chunk(Section("prose"), None, False)]


def _appended_lines(present: Section, wanted: Section) -> tuple[str, ...]:
    """The lines after ``wanted``'s body in ``present``'s, when ``present`` is ``wanted`` (trailing blank
    lines aside, markers alike) with text written after it; else ``()``."""
    if present.markers != wanted.markers:
        return ()
    body = list(wanted.body)
    while body and present.body[: len(body)] != tuple(body) and not body[-1].strip():
        body.pop()  # present may lack wanted's trailing blank lines
    if present.body[: len(body)] != tuple(body):
        return ()
    rest = present.body[len(body) :]
    return rest if any(line.strip() for line in rest) else ()


def _same_section(a: Section, b: Section) -> bool:
    return (a.type, a.adapter, a.attrs, a.markers, a.body) == (b.type, b.adapter, b.attrs, b.markers, b.body)


# -- parsing --------------------------------------------------------------------------------------


def read_document(path: str | Path) -> Document:
    """Read and parse the file at ``path``.

    Raises:
        OSError: the file cannot be read.
        DocumentError: the file is not a valid .dlm document.
    """
    return parse_bytes(Path(path).read_bytes(), path=path)


MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest document parsed (bytes): 16 MiB is thousands of times a real notebook's Q/A sections, and a
larger file would cost the daemon and the training process gigabytes of parse and tokenizer state."""


def parse_bytes(data: bytes, *, path: str | Path | None = None) -> Document:
    """Parse a document from its bytes (UTF-8, optional BOM, any of LF / CRLF / CR line ends).

    Raises:
        DocumentError: larger than :data:`MAX_DOCUMENT_BYTES`, not UTF-8, no frontmatter, invalid
            frontmatter, or a malformed fence.
    """
    if len(data) > MAX_DOCUMENT_BYTES:
        raise DocumentError(
            f"the document is {len(data):,} bytes; learnerd reads at most {MAX_DOCUMENT_BYTES:,} "
            "(split it into several documents)",
            path=path,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8", errors="replace")
        line = len(_LINE_END_RE.findall(prefix)) + 1
        raise DocumentError(f"not valid UTF-8 at byte {exc.start}: {exc.reason}", path=path, line=line) from None
    return parse_text(text, path=path)


def parse_text(text: str, *, path: str | Path | None = None) -> Document:
    """Parse a document from text (see :func:`parse_bytes`)."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    lines = _split_lines(text[len(bom) :])
    texts = [t for t, _ in lines]
    if texts[0] != "---":
        raise DocumentError(f"expected '---' on line 1 to open the frontmatter, got {texts[0][:40]!r}", path=path)
    close = next((i for i in range(1, len(texts)) if texts[i] == "---"), None)
    if close is None:
        raise DocumentError("no closing '---' for the frontmatter", path=path, line=1)
    frontmatter = parse_frontmatter("\n".join(texts[1:close]), path=path, first_line=2)

    body_start = close + 1
    body_end = len(lines)
    if body_end - body_start >= 2 and texts[body_start] == "":
        body_start += 1  # dlm strips one blank line after the frontmatter
    if body_end - body_start >= 2 and texts[body_end - 1] == "":
        body_end -= 1  # ...and the final newline: the empty last "line" after it holds no bytes
    if body_end - body_start == 1 and texts[body_start] == "" and lines[body_start][1] == "":
        body_end = body_start
    head = bom + "".join(t + e for t, e in lines[:body_start])
    chunks = tuple(_tokenize(lines, body_start, body_end, path))
    first_end = lines[0][1]
    return Document(
        frontmatter=frontmatter,
        path=Path(path) if path is not None else None,
        newline="\r\n" if first_end == "\r\n" else "\n",
        _head=head,
        _chunks=chunks,
    )


def parse_body(text: str) -> tuple[Section, ...]:
    """The sections of a document body given without frontmatter (line numbers count from its first line).

    Raises:
        DocumentError: a malformed fence or an unterminated code block.
    """
    lines = _split_lines(text)
    end = len(lines) - 1 if len(lines) > 1 and lines[-1][0] == "" else len(lines)  # the final line end ends a line
    return tuple(c.section for c in _tokenize(lines, 0, end, None) if c.visible)


def _split_lines(text: str) -> list[tuple[str, str]]:
    """``(line, line end)`` pairs; the last line has end ``""`` (and is ``""`` when text ends in a line end)."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _LINE_END_RE.finditer(text):
        out.append((text[pos : m.start()], m.group()))
        pos = m.end()
    out.append((text[pos:], ""))
    return out


def _tokenize(lines: list[tuple[str, str]], start: int, end: int, path: str | Path | None) -> Iterable[_Chunk]:
    """Split ``lines[start:end]`` into chunks at fence lines outside code blocks (dlm's body tokenizer)."""
    code_open_at: int | None = None
    chunk_start = start
    header: tuple[str, str | None, tuple[tuple[str, str], ...]] | None = None  # None: unfenced prose
    for i in range(start, end):
        text = lines[i][0]
        if text.startswith("```"):
            code_open_at = None if code_open_at is not None else i
            continue
        if code_open_at is not None or not text.startswith("::"):
            continue
        fence = _parse_fence(text, i + 1, path)
        if fence is None:
            continue
        if i > chunk_start:
            yield _make_chunk(lines, chunk_start, i, header, path)
        chunk_start, header = i, fence
    if code_open_at is not None:
        raise DocumentError("unterminated ``` code block", path=path, line=code_open_at + 1)
    if end > chunk_start:
        yield _make_chunk(lines, chunk_start, end, header, path)


def _parse_fence(
    text: str, line: int, path: str | Path | None
) -> tuple[str, str | None, tuple[tuple[str, str], ...]] | None:
    """``(type, adapter, attrs)`` when ``text`` is a fence line, None when it is not one.

    Raises:
        DocumentError: it is a fence dlm refuses (unknown type, bad adapter name, bad attributes).
    """
    m = _ATTR_FENCE_RE.match(text)
    if m:
        kind = m.group(1)
        if kind not in _ATTR_SPEC:
            raise DocumentError(f"fence '::{kind} ...::' does not take attributes", path=path, line=line)
        required, allowed = _ATTR_SPEC[kind]
        attrs: dict[str, str] = {}
        for kv in _ATTR_KV_RE.finditer(m.group(2)):
            key, value = kv.groups()
            if key in attrs or key not in allowed or not value.isascii():
                raise DocumentError(
                    f"fence '::{kind} ...::' has a repeated, unknown or non-ASCII attribute {key!r}",
                    path=path,
                    line=line,
                )
            attrs[key] = value
        if not required <= attrs.keys():
            raise DocumentError(
                f"fence '::{kind} ...::' needs attribute(s) {sorted(required - attrs.keys())}", path=path, line=line
            )
        return kind, None, tuple(attrs.items())
    m = _FENCE_RE.match(text)
    if not m:
        return None
    name = m.group(1)
    kind, _, adapter = name.partition("#")
    if "#" in name and not _ADAPTER_RE.fullmatch(adapter):
        raise DocumentError(f"fence '::{name}::' has an invalid adapter name {adapter!r}", path=path, line=line)
    if kind not in SECTION_TYPES:
        raise DocumentError(
            f"unknown section fence '::{name}::' (known: {', '.join(SECTION_TYPES)})", path=path, line=line
        )
    if kind in _ATTR_SPEC:
        raise DocumentError(f"fence '::{name}::' needs attributes, e.g. ::{kind} path=\"...\"::", path=path, line=line)
    return kind, adapter or None, ()


def _make_chunk(
    lines: list[tuple[str, str]],
    start: int,
    end: int,
    header: tuple[str, str | None, tuple[tuple[str, str], ...]] | None,
    path: str | Path | None,
) -> _Chunk:
    source = "".join(t + e for t, e in lines[start:end])
    texts = [t for t, _ in lines[start:end]]
    if header is None:
        section = Section("prose", tuple(texts), fenced=False, start_line=start + 1)
        return _Chunk(section, source, bool(section.content.strip()))
    kind, adapter, attrs = header
    body = texts[1:]
    markers: list[str] = []
    if kind in ("instruction", "preference"):
        while body:
            first = body[0]
            if not (
                HARVEST_MARKER_RE.match(first)
                or (
                    kind == "preference"
                    and _valid_marker(_MINED_MARKER_RE, _MINED_KEYS, first, start + 2 + len(markers), path)
                )
                or (
                    kind == "instruction"
                    and _valid_marker(_SYNTH_MARKER_RE, _SYNTH_KEYS, first, start + 2 + len(markers), path)
                )
            ):
                break
            markers.append(body.pop(0))
    section = Section(kind, tuple(body), adapter, attrs, tuple(markers), fenced=True, start_line=start + 1)
    return _Chunk(section, source, kind != "prose" or bool(section.content.strip()))


def _valid_marker(regex: re.Pattern[str], keys: frozenset[str], text: str, line: int, path: str | Path | None) -> bool:
    """True when ``text`` is one of dlm's attribute markers with exactly ``keys``; False when it is not a
    marker; DocumentError when it is a malformed one (dlm refuses those too)."""
    m = regex.match(text)
    if not m:
        return False
    found = [kv.group(1) for kv in _ATTR_KV_RE.finditer(m.group(1))]
    if not _MARKER_BLOB_RE.fullmatch(m.group(1)) or len(found) != len(set(found)) or set(found) != keys:
        raise DocumentError(
            f"malformed provenance marker (needs exactly {sorted(keys)}): {text[:80]!r}", path=path, line=line
        )
    return True
