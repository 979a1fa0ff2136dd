"""``learnerd db scrub``: the secret redactor run once over what is already stored.

Redaction before storage (:mod:`learnerd.privacy.redact`) keeps new secrets out; state written before it
existed (or before a ``[privacy]`` pattern was added) is scrubbed here, place by place:

* the store: ``blocks`` (context cells, generated and executed cells), ``examples`` (query, answer),
  ``foyle_traces`` (the raw halves of foyle traces), ``suggestions`` (the answers learnerd served: answer,
  command, session; :mod:`learnerd.store.suggestions`); the vector of an example whose query changed is
  deleted (the next run embeds the redacted text: a vector of a secret is not kept); a SQLite file is then
  vacuumed and its write-ahead log truncated, so no old value survives in a free page;
* the ``.dlm`` documents given: every auto-written section (a ``dlm-auto-harvest`` marker: learnerd's probe
  sections, harvests, injected probes) whose text holds a secret is rewritten in place; hand-written
  sections are a person's own and are not touched. A changed section has a new section id, so the
  document's next training cycle is fresh (:func:`learnerd.training.cycle.plan_cycle`);
* the probe journal and the ``POST /v1/blocks`` block-log files (``<state_dir>/ingest``): rewritten line by
  line, atomically (temp file, fsync, rename); the watermark of a rewritten block-log file is dropped, so
  the analyzer reads it again from its start (merging an event twice changes nothing);
* the evaluation reports beside adapter versions (``eval.json``: the probes' prompts and references) are
  rewritten; the adapter weights themselves cannot be: a document whose sections changed retrains from
  scratch, and older versions stay until they are deleted;
* foyle export files of changed examples are deleted (the export reconciler writes them again).

The privacy policy is applied too: an example, or an auto-written section's Q/A pair, that the command policy
or the injection rule refuses now (a rule added since it was learned) is deleted with its vector and foyle
export file, and a probe journal line of a pending injected probe it refuses is dropped (``refused`` in the
report); its block stays, and the next run's examples reconciler, judging it
the same way, does not learn it again.

The caller holds the state directory's lock (no daemon may write meanwhile). The screen is passed in (a
:class:`Scrubber`, in practice :class:`learnerd.privacy.screen.Screen`), so the store does not depend on the
privacy package. With ``dry_run`` nothing is written; the report says what would change.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, overload

from learnerd.store import db, foyle_examples
from learnerd.store.atomic import atomic_write_bytes
from learnerd.store.dlm import Document, DocumentError, Section, read_document, update_document
from learnerd.store.embeddings import get_metas


class Redacted(Protocol):
    """What a redaction gives: the ``text`` and how many placeholders of each kind were put in."""

    @property
    def text(self) -> str: ...
    @property
    def kinds(self) -> Mapping[str, int]: ...


class Scrubber(Protocol):
    """The screen's entry points (:class:`learnerd.privacy.screen.Screen`): redaction, and the policy's refusal."""

    def redact(self, text: str) -> Redacted: ...

    def redact_json(self, value: Any, kinds: Counter[str] | None = None) -> Any: ...

    def refusal(self, intent: str, command: str) -> str | None: ...


@dataclass
class ScrubReport:
    """What a scrub changed (or would change): rows per table, sections per document, lines (or, in a JSON
    report, strings) per file, the vectors and foyle files deleted, and the placeholders put in, by kind."""

    tables: Counter[str] = field(default_factory=Counter)
    vectors: int = 0
    documents: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    export_files: int = 0
    redacted: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (``learnerd db scrub --json``)."""
        return {
            "dry_run": self.dry_run,
            "tables": dict(sorted(self.tables.items())),
            "vectors": self.vectors,
            "documents": dict(sorted(self.documents.items())),
            "files": dict(sorted(self.files.items())),
            "export_files": self.export_files,
            "redacted": dict(sorted(self.redacted.items())),
            "refused": self.refused,
        }


def scrub_store(conn: Any, scrubber: Scrubber, report: ScrubReport, export_dir: Path | None = None) -> None:
    """Redact the store's tables in one transaction (see the module docstring); fills ``report``."""
    blocks, examples, traces, served = [], [], [], []
    for row in conn.execute("SELECT id, context, generated, executed FROM blocks ORDER BY id"):
        kinds: Counter[str] = Counter()
        cells = scrubber.redact_json(json.loads(row[1]), kinds)
        generated, executed = (_text(scrubber, t, kinds) for t in (row[2], row[3]))
        if kinds:
            context = json.dumps(cells, ensure_ascii=False, separators=(",", ":"))
            blocks.append((context, generated, executed, row[0]))
            report.redacted.update(kinds)
    refused: list[str] = []
    for row in conn.execute("SELECT id, query, answer FROM examples ORDER BY id"):
        if scrubber.refusal(row[1], row[2]):
            refused.append(row[0])
            continue
        kinds = Counter()
        query, answer = _text(scrubber, row[1], kinds), _text(scrubber, row[2], kinds)
        if kinds:
            examples.append((query, answer, row[0], query != row[1]))
            report.redacted.update(kinds)
    for row in conn.execute("SELECT trace_id, request, response FROM foyle_traces ORDER BY trace_id"):
        kinds = Counter()
        halves = [_json_text(scrubber, half, kinds) for half in (row[1], row[2])]
        if kinds:
            traces.append((*halves, row[0]))
            report.redacted.update(kinds)
    for row in conn.execute("SELECT block_id, answer, command, session FROM suggestions ORDER BY block_id"):
        kinds = Counter()
        texts = [_text(scrubber, text, kinds) for text in (row[1], row[2], row[3])]
        if kinds:
            served.append((*texts, row[0]))
            report.redacted.update(kinds)
    report.tables.update(blocks=len(blocks), examples=len(examples), foyle_traces=len(traces), suggestions=len(served))
    report.refused += len(refused)
    requery = [e[2] for e in examples if e[3]]
    if report.dry_run:
        report.vectors = len(get_metas(conn, requery + refused))
    else:
        with db.transaction(conn):
            for values in blocks:
                conn.execute("UPDATE blocks SET context = ?, generated = ?, executed = ? WHERE id = ?", values)
            for query, answer, example_id, _ in examples:
                conn.execute("UPDATE examples SET query = ?, answer = ? WHERE id = ?", (query, answer, example_id))
            for values in traces:
                conn.execute("UPDATE foyle_traces SET request = ?, response = ? WHERE trace_id = ?", values)
            for values in served:
                conn.execute("UPDATE suggestions SET answer = ?, command = ?, session = ? WHERE block_id = ?", values)
            for example_id in refused:
                conn.execute("DELETE FROM examples WHERE id = ?", (example_id,))
            for example_id in requery + refused:
                report.vectors += conn.execute("DELETE FROM embeddings WHERE example_id = ?", (example_id,)).rowcount
        if getattr(conn, "dialect", "sqlite") == "sqlite" and (blocks or examples or traces or served or refused):
            # the old values must not survive in free pages or the write-ahead log
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if export_dir is not None:
        for example_id in [e[2] for e in examples] + refused:
            path = foyle_examples.example_path(export_dir, example_id)
            if path.exists() if report.dry_run else foyle_examples.remove(path):
                report.export_files += 1


def scrub_documents(documents: Iterable[Path], scrubber: Scrubber, report: ScrubReport) -> None:
    """Redact the auto-written sections of ``documents`` (missing ones skipped), each rewritten atomically.

    Raises:
        DocumentError: a document does not parse (nothing of it was written).
        ConflictError, OSError: a document could not be rewritten.
    """
    for path in documents:
        if not path.is_file():
            continue
        counts: list[tuple[int, Counter[str], int]] = []

        def edit(document: Document, counts: list[tuple[int, Counter[str], int]] = counts) -> Document:
            kinds: Counter[str] = Counter()
            auto = [s for s in document.sections if s.harvest_source is not None]
            refused = {s.section_id for s in auto if _refused(scrubber, s)}
            document = document.remove_sections(lambda s: s.harvest_source is not None and s.section_id in refused)
            changed = len(refused)
            for section in document.sections:
                if section.harvest_source is None:
                    continue
                body = tuple(_text(scrubber, section.content, kinds).split("\n"))
                if body != section.body:
                    document = document.upsert_auto_section(replace(section, body=body))
                    changed += 1
            counts.append((changed, kinds, len(refused)))
            return document

        if report.dry_run:
            edit(read_document(path))
        else:
            update_document(path, edit)
        changed, kinds, refused_sections = counts[-1]
        if changed:
            report.documents[str(path)] = changed
            report.redacted.update(kinds)
            report.refused += refused_sections


def _refused(scrubber: Scrubber, section: Section) -> bool:
    """Whether a Q/A pair of an auto-written ``::instruction::`` section is one the policy refuses."""
    if section.type != "instruction":
        return False
    try:
        pairs = section.qa_pairs()
    except DocumentError:  # not Q/A pairs: nothing the policy judges
        return False
    return any(scrubber.refusal(pair.question, pair.answer) for pair in pairs)


def scrub_lines(path: Path, scrubber: Scrubber, report: ScrubReport, *, journal: bool = False) -> bool:
    """Redact every JSON line of ``path`` (the probe journal, a block-log file), rewriting the file atomically
    (its mode kept) when a line changed; a line that is not JSON (a torn last line) is kept as it is. With
    ``journal`` (``path`` is the probe journal, :mod:`learnerd.store.probe_journal`), an ``accept`` line whose
    probe (prompt as the intent, reference as the command) the privacy policy refuses is dropped and counted in
    ``refused``: the probe is never written into its document. True when the file changed (or, with
    ``dry_run``, would)."""
    if not path.is_file():
        return False
    out, changed, kinds = [], 0, Counter[str]()
    data = path.read_bytes()
    for line in data.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if journal and _refused_probe(scrubber, record):
            changed += 1
            report.refused += 1
            continue
        found: Counter[str] = Counter()
        redacted = scrubber.redact_json(record, found)
        if found:
            end = b"\n" if line.endswith(b"\n") else b""
            out.append(json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode() + end)
            changed += 1
            kinds.update(found)
        else:
            out.append(line)
    if not changed:
        return False
    report.files[str(path)] = changed
    report.redacted.update(kinds)
    if not report.dry_run:
        atomic_write_bytes(path, b"".join(out), mode=path.stat().st_mode & 0o777)
    return True


def _refused_probe(scrubber: Scrubber, record: Any) -> bool:
    """Whether ``record`` is a probe journal ``accept`` line whose probe the policy refuses."""
    if not isinstance(record, dict) or record.get("op") != "accept" or not isinstance(record.get("probe"), dict):
        return False
    probe = record["probe"]
    prompt, reference = probe.get("prompt"), probe.get("reference")
    return isinstance(prompt, str) and isinstance(reference, str) and bool(scrubber.refusal(prompt, reference))


def scrub_json_file(path: Path, scrubber: Scrubber, report: ScrubReport) -> bool:
    """Redact every string of the JSON document ``path`` (an evaluation report, ``eval.json``: its probes'
    prompts and references), rewriting it atomically in sway's layout (2-space indent, sorted keys, final
    newline) when one changed; a file that is not JSON is left alone. True when it changed (or would)."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    found: Counter[str] = Counter()
    redacted = scrubber.redact_json(value, found)
    if not found:
        return False
    report.files[str(path)] = sum(found.values())
    report.redacted.update(found)
    if not report.dry_run:
        text = json.dumps(redacted, indent=2, sort_keys=True) + "\n"
        atomic_write_bytes(path, text.encode(), mode=path.stat().st_mode & 0o777)
    return True


def drop_watermarks(conn: Any, paths: Iterable[Path]) -> None:
    """Forget the analyzer's watermarks of ``paths`` (every host's), so the files are read again from their start."""
    with db.transaction(conn):
        for path in paths:
            conn.execute("DELETE FROM watermarks WHERE path = ?", (str(path),))


@overload
def _text(scrubber: Scrubber, text: str, kinds: Counter[str]) -> str: ...
@overload
def _text(scrubber: Scrubber, text: str | None, kinds: Counter[str]) -> str | None: ...
def _text(scrubber: Scrubber, text: str | None, kinds: Counter[str]) -> str | None:
    if not text:
        return text
    redaction = scrubber.redact(text)
    kinds.update(redaction.kinds)
    return redaction.text


def _json_text(scrubber: Scrubber, text: str | None, kinds: Counter[str]) -> str | None:
    """A JSON text with its strings redacted (re-serialized only when something was)."""
    if not text:
        return text
    found: Counter[str] = Counter()
    value = scrubber.redact_json(json.loads(text), found)
    if not found:
        return text
    kinds.update(found)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
