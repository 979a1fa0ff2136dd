"""``learnerd forget``'s work on the store and the files: take a learned example back everywhere it went.

Two steps, so the daemon can run the first on its event loop and the second in a worker thread:

1. :func:`forget_in_store` — one transaction: write the tombstone (:mod:`learnerd.store.tombstones`; it keeps
   re-ingestion, backfill and fleet peers from learning the blocks again), delete the examples and their
   vectors (the ``embeddings`` rows; the caller deletes them from its in-memory index), and the
   suggestions that hold them (:func:`learnerd.store.suggestions.forget`: the served answers of those
   blocks and, for ``match``, every served answer containing the text).
2. :func:`forget_in_files` — remove every auto-written section holding a forgotten example from the ``.dlm``
   documents given (the probes reconciler's ``learnerd/<id>`` section, and any other tool's auto section, a
   harvest's reinforcement copy say, with the same Q/A pair; for ``match``, also every auto-written section
   whose text holds the match: the probes RPC ``inject_probe`` wrote, ``rpc-inject/…``; hand-written sections
   are never touched), each document rewritten atomically by :func:`~learnerd.store.dlm.update_document`;
   delete the foyle export files (``<dir>/<id>.example.binpb``); and, for ``match``, drop the injected probes
   holding the text from the probe journal and rewrite it with the pending probes only, so no copy of an
   injected probe already written (the journal's consumed lines) is left either
   (:meth:`~learnerd.store.probe_journal.ProbeJournal.forget`).

A ``match`` needs :data:`MIN_MATCH_CHARS` non-space characters (:func:`check_match`): ``" "`` or ``"e"`` is in
nearly every example, and its tombstone would keep everything out from then on.

A document that lost sections trains **fresh** at its next cycle: :func:`learnerd.training.cycle.plan_cycle`
plans a from-scratch adapter whenever a section the current adapter trained on is gone, so no trace of the
example survives in the weights (the daemon queues that cycle at once; offline, the next ``learnerd run``
or ``learnerd train`` does it). With ``dry_run`` nothing is written: the report says what would go.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learnerd.store import db, foyle_examples, suggestions
from learnerd.store.dlm import ConflictError, Document, DocumentError, Section, read_document, update_document
from learnerd.store.embeddings import delete_vectors, get_metas
from learnerd.store.examples import Example, delete_example, get_examples, list_examples
from learnerd.store.probe_journal import InjectedProbe, ProbeJournal
from learnerd.store.routing import rollover_chain
from learnerd.store.tombstones import Tombstone, put_tombstone

PROBES_SOURCE_PREFIX = "learnerd/"
"""The marker source prefix of the probes reconciler's sections (``learnerd/<example id>``)."""


MIN_MATCH_CHARS = 4
"""The fewest non-space characters a ``match`` may have."""


class NothingToForget(ValueError):
    """``--example`` / ``--block`` names an id the store has neither as an example nor as a block."""


def check_match(text: str) -> None:
    """Refuse a ``match`` text with fewer than :data:`MIN_MATCH_CHARS` non-space characters.

    Raises:
        ValueError: a one-line reason.
    """
    if len("".join(text.split())) < MIN_MATCH_CHARS:
        raise ValueError(
            f"a match needs at least {MIN_MATCH_CHARS} non-space characters, not {text!r}: a shorter text is in "
            "nearly every example, and its tombstone would keep everything out"
        )


@dataclass
class ForgetReport:
    """What a forget took back (or, with ``dry_run``, would take back).

    ``tombstone``: as stored; ``examples``: the examples deleted; ``vectors``: how many vectors went;
    ``suggestions``: how many served answers went (:mod:`learnerd.store.suggestions`);
    ``documents``: document path → sections removed; ``export_files``: foyle files deleted;
    ``journal_probes``: injected probes dropped from the probe journal; ``retrain``: the documents whose next
    cycle trains fresh; ``errors``: documents that could not be rewritten (path: reason).
    """

    tombstone: Tombstone
    examples: list[Example] = field(default_factory=list)
    vectors: int = 0
    suggestions: int = 0
    documents: dict[str, int] = field(default_factory=dict)
    export_files: list[str] = field(default_factory=list)
    journal_probes: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False

    @property
    def retrain(self) -> list[str]:
        """The documents that lost sections (their next training cycle is from scratch)."""
        return sorted(path for path, n in self.documents.items() if n)

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (``learnerd forget --json``, the admin socket's answer)."""
        return {
            "dry_run": self.dry_run,
            "tombstone": self.tombstone.to_json(),
            "examples": [{"id": e.id, "query": e.query, "answer": e.answer} for e in self.examples],
            "vectors": self.vectors,
            "suggestions": self.suggestions,
            "documents": dict(sorted(self.documents.items())),
            "export_files": self.export_files,
            "journal_probes": self.journal_probes,
            "retrain": self.retrain,
            "errors": self.errors,
        }


def forget_in_store(
    conn: Any,
    kind: str,
    value: str,
    *,
    source_block_ids: Sequence[str] = (),
    dry_run: bool = False,
    now: float | None = None,
) -> ForgetReport:
    """Step 1 (see the module docstring): the tombstone, the examples and their vectors, in one transaction.

    Args:
        conn: the store (SQLite or PostgreSQL).
        kind: ``example`` / ``block`` (``value`` is an id), ``source`` (``value`` is a log file, whose blocks
            the caller read: ``source_block_ids``), ``match`` (``value`` is text; every example whose query or
            answer contains it, case-sensitive).
        value: the id, file or text.
        source_block_ids: for ``source``, the blocks the file names.
        dry_run: write nothing.
        now: the tombstone's time, seconds since the epoch (default: now).

    Raises:
        NothingToForget: ``example`` / ``block`` names an id that is neither an example nor a block.
        ValueError: an unknown ``kind``, an empty ``value``, or a ``match`` that :func:`check_match` refuses.
    """
    if not value:
        raise ValueError(f"nothing to forget: an empty {kind}")
    if kind in ("example", "block"):
        block_ids = [value]
        examples = list(get_examples(conn, block_ids).values())
        if not examples and conn.execute("SELECT 1 FROM blocks WHERE id = ?", (value,)).fetchone() is None:
            raise NothingToForget(f"no example or block has the id {value!r}")
    elif kind == "source":
        block_ids = list(dict.fromkeys([*source_block_ids, *blocks_read_from(conn, value)]))
        examples = list(get_examples(conn, block_ids).values())
    elif kind == "match":
        check_match(value)
        examples = [e for e in list_examples(conn) if value in e.query or value in e.answer]
        block_ids = [e.id for e in examples]
    else:
        raise ValueError(f"nothing to forget by {kind!r}")
    stone = Tombstone(kind, value, tuple(block_ids), time.time() if now is None else now)
    ids = [e.id for e in examples]
    report = ForgetReport(stone, sorted(examples, key=lambda e: e.id), dry_run=dry_run)
    if dry_run:
        report.vectors = len(get_metas(conn, ids))
        report.suggestions = suggestions.forget(conn, block_ids, _match_text(kind, value), dry_run=True)
        return report
    with db.transaction(conn):
        report.tombstone = put_tombstone(conn, stone)
        for example_id in ids:
            delete_example(conn, example_id)
        report.vectors = delete_vectors(conn, ids) if ids else 0
        report.suggestions = suggestions.forget(conn, block_ids, _match_text(kind, value))
    return report


def blocks_read_from(conn: Any, path: str) -> list[str]:
    """The blocks whose executed cell was read from the log file ``path`` (as the analyzer recorded it:
    :class:`~learnerd.store.blocks.LineOrigin`), under its absolute or its real path (symbolic links resolved)."""
    forms = list(dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]))
    marks = ", ".join("?" * len(forms))
    return [r[0] for r in conn.execute(f"SELECT id FROM blocks WHERE executed_path IN ({marks}) ORDER BY id", forms)]


def _match_text(kind: str, value: str) -> str | None:
    return value if kind == "match" else None


def forget_in_files(
    report: ForgetReport, documents: Iterable[Path], export_dir: Path | None, journal: ProbeJournal | None = None
) -> ForgetReport:
    """Step 2 (see the module docstring): the sections holding ``report.examples`` (and for a ``match``, every
    auto-written section holding its text) removed from ``documents`` (missing ones skipped; one that does not
    parse or keeps changing is named in ``report.errors``), their foyle files deleted from ``export_dir``
    (None: no export), and for a ``match`` the injected probes holding the text dropped from ``journal``
    (None: none). Returns ``report``, filled in.

    Raises:
        OSError: a document, an export file or the journal could not be written or deleted.
    """
    match = report.tombstone.value if report.tombstone.kind == "match" else None
    if not report.examples and match is None:
        return report
    sources = {PROBES_SOURCE_PREFIX + e.id for e in report.examples}
    pairs = {(e.query.strip(), e.answer.strip()) for e in report.examples}

    def holds(section: Section) -> bool:
        if section.harvest_source is None:
            return False
        if section.harvest_source in sources or (match is not None and match in section.content):
            return True
        try:
            return any((p.question, p.answer) in pairs for p in section.qa_pairs())
        except DocumentError:
            return False

    for path in dict.fromkeys(documents):
        if not path.is_file():
            continue
        try:
            removed = _remove_sections(path, holds, report.dry_run)
        except (DocumentError, ConflictError) as exc:
            report.errors[str(path)] = str(exc)
            continue
        if removed:
            report.documents[str(path)] = removed
    if export_dir is not None:
        for example in report.examples:
            path = foyle_examples.example_path(export_dir, example.id)
            if path.exists() if report.dry_run else foyle_examples.remove(path):
                report.export_files.append(str(path))
    if journal is not None and match is not None:

        def holds_text(probe: InjectedProbe) -> bool:
            return match in probe.prompt or match in probe.reference

        report.journal_probes = journal.forget(holds_text, dry_run=report.dry_run)
    return report


def _remove_sections(path: Path, holds: Callable[[Section], bool], dry_run: bool) -> int:
    """Remove the sections ``holds`` accepts from the document ``path`` (atomically; read only with
    ``dry_run``); how many there were."""
    if dry_run:
        return sum(1 for s in read_document(path).sections if holds(s))
    counts: list[int] = []

    def edit(document: Document) -> Document:
        counts.append(sum(1 for s in document.sections if holds(s)))
        return document.remove_sections(holds)

    update_document(path, edit)
    return counts[-1]


def documents_in(roots: Iterable[Path], named: Iterable[Path] = ()) -> list[Path]:
    """The ``.dlm`` documents a forget looks in: ``named`` (the routed documents) with their rollovers
    (:func:`~learnerd.store.routing.rollover_chain`) and every ``*.dlm`` under ``roots`` (``docs_dirs``),
    without duplicates, in that order."""
    found = [chained for document in named for chained in rollover_chain(document)]
    for root in roots:
        if root.is_dir():
            found += sorted(root.rglob("*.dlm"))
    return list(dict.fromkeys(found))
