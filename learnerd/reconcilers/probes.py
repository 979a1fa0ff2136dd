"""The probes reconciler: every learnable example as one ``### Q !probe`` section of its .dlm document.

Key: a document path (``str(route(example))``), not an example id. The examples reconciler adds
``str(route(example))`` to the ``probes`` workqueue whenever it writes or deletes an example (both the
old and the new route when an example's route changes), so a burst of many examples collapses into one
rewrite of the document. :meth:`ProbesReconciler.resync_keys` lists every routable document for a full resync.

``reconcile(doc_path)`` is level-triggered. Desired: one section per example routed to ``doc_path``::

    ::instruction::
    <!-- dlm-auto-harvest: source="learnerd/<example id>" -->
    ### Q !probe
    <query>

    ### A
    <answer>

Actual: the document's sections whose marker source starts with ``learnerd/``. A changed section is
replaced in place, a section of an example that no longer exists is removed, new ones are appended (oldest
example first); hand-written sections and other tools' auto sections are never touched. The write is the
compare-and-swap of :func:`learnerd.store.dlm.update_document` (a person's concurrent save is merged,
never lost) and happens only when something changed. The document is created (valid frontmatter, fresh
ULID) the first time an example is routed to it.

Rollover (:mod:`learnerd.store.routing`): the key's document and its rollovers (``learned-2.dlm``, …) are
reconciled together. A section stays in the document that holds it; a new one goes to the last document of
the chain while that stays within ``[probes] rollover_bytes`` (12 MiB by default), else to a new rollover,
created as the first document was (its own ULID: it trains and serves as any other document). A section that
does not fit in an empty document is refused (``[examples]``' caps keep every section far smaller).

Edge cases of the Q/A grammar are refused, not escaped: an example whose query or answer the grammar
cannot carry exactly (a line reading as ``### Q`` / ``### A`` or as a ``::type::`` fence, an unbalanced
code fence, ...; see :func:`learnerd.store.dlm.probe_section`) gets no section, is logged, and is counted
in :attr:`ProbesReconciler.refused`. Escaping would make dlm train on text the person never wrote. Leading
and trailing whitespace is not part of a turn in the grammar; it is stripped before the comparison.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, Unpack

import anyio.to_thread
import structlog

from learnerd.reconcilers.spec import EXAMPLES, ControllerSpec, ExampleChange, SpecConfig, Watch, Wiring
from learnerd.runtime.reconcile import Result
from learnerd.store.db import connect
from learnerd.store.dlm import (
    Document,
    DocumentError,
    Section,
    UnrepresentableError,
    new_document,
    probe_section,
    read_document,
    update_document,
)
from learnerd.store.examples import EXAMPLE_SOURCE_PREFIX, Example, list_examples
from learnerd.store.routing import DocumentRouter, rollover_chain, rollover_path
from learnerd.training.recipes import default_training

log = structlog.get_logger(__name__)

SOURCE_PREFIX = EXAMPLE_SOURCE_PREFIX
ROLLOVER_BYTES = 12 * 1024 * 1024
"""``[probes] rollover_bytes``' default: three quarters of what learnerd parses (16 MiB), so a person's edits
and the sections harvested or injected into a full document still fit."""
_NEW_DOCUMENT_PROSE = (
    "# Learned by learnerd\n\n"
    "learnerd keeps one `### Q !probe` section below per example it learned from the commands people ran.\n"
    "Sections with a `learnerd/` marker are rewritten by learnerd; edit anything else freely."
)


@dataclass(frozen=True)
class ProbesOutcome:
    """What one reconcile of a document did: counts of probe sections added, replaced, removed and left
    as they were, the examples refused (id -> reason), and whether the file was written."""

    path: Path
    added: int = 0
    replaced: int = 0
    removed: int = 0
    unchanged: int = 0
    refused: tuple[tuple[str, str], ...] = ()
    written: bool = False


class ProbesReconciler:
    """Reconciles one .dlm document (key: its path) against the examples routed to it.

    Args:
        router: example → document (:mod:`learnerd.store.routing`).
        db_path: the store the examples are read from, a SQLite path or a PostgreSQL URL (a connection per
            reconcile, in a worker thread).
        base_model: the ``base_model`` of a document this reconciler creates.
        broken_document_retry_s: a document that does not parse is checked again after this long (seconds).
        rewrite_interval_s: a document is rewritten at most this often (seconds).
        rollover_bytes: a document this large (bytes) takes no new section: they go to its next rollover
            (:mod:`learnerd.store.routing`).
        before_replace: passed to :func:`~learnerd.store.dlm.update_document` (a test hook).
        monotonic: the clock of ``rewrite_interval_s``.
    """

    name = "probes"

    def __init__(
        self,
        router: DocumentRouter,
        *,
        db_path: str | Path,
        base_model: str,
        broken_document_retry_s: float = 60.0,
        rewrite_interval_s: float = 1.0,
        rollover_bytes: int = ROLLOVER_BYTES,
        before_replace: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.router = router
        self._db_path = db_path
        self._base_model = base_model
        self._retry_s = broken_document_retry_s
        self._before_replace = before_replace
        self._refused: dict[str, dict[str, str]] = {}  # document key -> example id -> reason
        self.changes: Counter[str] = Counter()  # sections added / replaced / removed, documents written
        self._rewrite_interval_s = rewrite_interval_s
        self._rollover_bytes = rollover_bytes
        self._monotonic = monotonic
        self._last_write: dict[str, float] = {}  # document key -> monotonic time of its last write
        # document key -> example id -> ((query, answer), its section or why it was refused): a rewrite
        # renders only the examples that changed since the last one (rendering parses each section back)
        self._rendered: dict[str, dict[str, tuple[tuple[str, str], Section | str]]] = {}

    @property
    def refused(self) -> dict[str, str]:
        """Example id -> why it has no section, for the examples refused at their document's last reconcile."""
        return {eid: reason for per_doc in self._refused.values() for eid, reason in per_doc.items()}

    def refusals(self) -> list[dict[str, str]]:
        """The examples refused at their document's last reconcile, as ``{"example_id", "document",
        "reason"}`` (JSON-able; sorted by document, then example id)."""
        return [
            {"example_id": eid, "document": doc, "reason": reason}
            for doc, per_doc in sorted(self._refused.items())
            for eid, reason in sorted(per_doc.items())
        ]

    def route(self, example: Example) -> Path:
        """The document ``example``'s probe section belongs in (its workqueue key is ``str()`` of it)."""
        return self.router.route(example)

    def resync_keys(self) -> list[str]:
        """The key of every routable document (for a full resync)."""
        return [str(p) for p in self.router.documents()]

    async def reconcile(self, key: str) -> Result:
        """Reconcile the document ``key`` in a worker thread. A document that does not parse (a person's
        edit in progress, most likely) is logged and checked again after ``broken_document_retry_s``.

        A document written less than ``[probes] rewrite_interval_s`` ago is not touched yet: the key is
        requeued for when the interval ends, so a burst of examples becomes one rewrite (each rewrite
        renders every section of the document; the training it triggers is debounced anyway).
        """
        wait = self._last_write.get(key, -float("inf")) + self._rewrite_interval_s - self._monotonic()
        if wait > 0:
            return Result(requeue_after=wait)
        try:
            outcome = await anyio.to_thread.run_sync(self.reconcile_sync, key)
        except DocumentError as exc:
            log.warning("probes.document_invalid", path=key, error=str(exc), retry_s=self._retry_s)
            return Result(requeue_after=self._retry_s)
        if outcome.written:
            self._last_write[key] = self._monotonic()
        return Result()

    def reconcile_sync(self, key: str) -> ProbesOutcome:
        """The blocking reconcile (see the module docstring): the sections of the examples routed to ``key``,
        across ``key``'s rollover chain.

        Raises:
            DocumentError: a document of the chain does not parse, or would grow past what learnerd parses.
            ConflictError: a document changed under every write attempt (the caller retries).
            OSError, sqlite3.Error: the file system or the database failed.
        """
        path = Path(key)
        conn = connect(self._db_path)
        try:
            examples = [e for e in list_examples(conn) if self.route(e) == path]
        finally:
            conn.close()
        wanted: dict[str, Section] = {}
        refused: list[tuple[str, str]] = []
        previous, current = self._rendered.get(key, {}), {}
        for example in sorted(examples, key=lambda e: (e.updated_at, e.id)):
            turns = (example.query, example.answer)
            cached = previous.get(example.id)
            rendered = cached[1] if cached is not None and cached[0] == turns else _render(example, key)
            current[example.id] = (turns, rendered)
            if isinstance(rendered, Section):
                wanted[SOURCE_PREFIX + example.id] = rendered
            else:
                refused.append((example.id, rendered))
        self._rendered[key] = current
        present = {p: read_document(p) for p in rollover_chain(path) if p.is_file()}
        placed, too_large = self._place(path, wanted, present)
        refused += [(source.removeprefix(SOURCE_PREFIX), reason) for source, reason in too_large.items()]
        self._refused[key] = dict(refused)
        total = ProbesOutcome(path, refused=tuple(refused))
        for document_path, sections in placed.items():
            document = present.get(document_path)
            if document is None and not sections:
                continue
            if document is not None:
                diff = _diff(document, sections, document_path)
                if not (diff.added or diff.replaced or diff.removed):
                    total = replace(total, unchanged=total.unchanged + diff.unchanged)
                    continue
            result = self._write(document_path, sections)
            total = replace(
                total,
                added=total.added + result.added,
                replaced=total.replaced + result.replaced,
                removed=total.removed + result.removed,
                unchanged=total.unchanged + result.unchanged,
                written=total.written or result.written,
            )
        return total

    def _place(
        self, path: Path, wanted: dict[str, Section], present: dict[Path, Document]
    ) -> tuple[dict[Path, dict[str, Section]], dict[str, str]]:
        """Which document of ``path``'s chain each wanted section goes in (chain order), and the sections that
        fit in no document (source → why). A section already in a document stays there; a new one goes to the
        last document of the chain while that stays within ``rollover_bytes``, else to a new rollover."""
        chain = rollover_chain(path)
        home: dict[str, Path] = {}
        for document_path in chain:
            document = present.get(document_path)
            for section in document.auto_sections(SOURCE_PREFIX) if document is not None else ():
                if section.harvest_source in wanted:
                    home.setdefault(section.harvest_source, document_path)
        empty = len(self._new_document(path).to_bytes())
        size = {
            p: (
                len(present[p].to_bytes()) - sum(_section_bytes(s) for s in present[p].auto_sections(SOURCE_PREFIX))
                if p in present
                else empty
            )
            for p in chain
        }
        for source, document_path in home.items():
            size[document_path] += _section_bytes(wanted[source])
        too_large: dict[str, str] = {}
        last = chain[-1]
        for source, section in wanted.items():
            if source in home:
                continue
            needed = _section_bytes(section)
            if empty + needed > self._rollover_bytes:
                too_large[source] = (
                    f"its section is {needed:,} bytes: no document of at most {self._rollover_bytes:,} bytes "
                    "([probes] rollover_bytes) holds it"
                )
                continue
            if size[last] + needed > self._rollover_bytes:
                last = rollover_path(path, len(chain) + 1)
                chain.append(last)
                size[last] = empty
                log.info("probes.rollover", path=str(path), document=str(last), rollover_bytes=self._rollover_bytes)
            home[source] = last
            size[last] += needed
        placed: dict[Path, dict[str, Section]] = {p: {} for p in chain}
        for source, section in wanted.items():
            if source in home:
                placed[home[source]][source] = section
        return placed, too_large

    def _write(self, path: Path, wanted: dict[str, Section]) -> ProbesOutcome:
        """Make ``path``'s probe sections ``wanted`` (creating the document when there is none)."""
        counts: list[ProbesOutcome] = []

        def edit(document: Document) -> Document:
            counts.append(_diff(document, wanted, path))
            return document.sync_auto_sections(SOURCE_PREFIX, wanted, same=_same_probe)

        create = None
        if wanted:
            path.parent.mkdir(parents=True, exist_ok=True)

            def create() -> Document:
                return self._new_document(path)

        outcome = update_document(path, edit, create=create, before_replace=self._before_replace)
        result = replace(counts[-1], written=outcome.written)
        if outcome.written:
            self.changes.update(
                sections_added=result.added,
                sections_replaced=result.replaced,
                sections_removed=result.removed,
                documents_written=1,
            )
        log.info(
            "probes.reconciled",
            path=str(path),
            added=result.added,
            replaced=result.replaced,
            removed=result.removed,
            unchanged=result.unchanged,
            written=result.written,
            attempts=outcome.attempts,
        )
        return result

    def _new_document(self, path: Path) -> Document:
        return new_document(
            self._base_model, prose=_NEW_DOCUMENT_PROSE, training=default_training(self._base_model), path=path
        )


def _diff(document: Document, wanted: dict[str, Section], path: Path) -> ProbesOutcome:
    """What making ``document``'s probe sections ``wanted`` adds, replaces, removes and leaves."""
    present = {s.harvest_source: s for s in reversed(document.auto_sections(SOURCE_PREFIX))}
    unchanged = sum(1 for src, s in wanted.items() if src in present and _same_probe(present[src], s))
    kept = sum(1 for src in present if src in wanted)
    return ProbesOutcome(
        path,
        added=len(wanted) - kept,
        replaced=kept - unchanged,
        removed=len(document.auto_sections(SOURCE_PREFIX)) - kept,
        unchanged=unchanged,
    )


def _section_bytes(section: Section) -> int:
    """The bytes ``section`` takes in a document (its lines, LF-terminated, and a blank line after)."""
    return sum(len(line.encode("utf-8")) + 1 for line in section.lines()) + 1


def _render(example: Example, path: str) -> Section | str:
    """``example``'s probe section, or why the Q/A grammar refuses it (logged)."""
    try:
        return probe_section(example.query, example.answer, source=SOURCE_PREFIX + example.id)
    except UnrepresentableError as exc:
        log.warning("probes.example_refused", example_id=example.id, path=path, reason=str(exc))
        return str(exc)


def _same_probe(present: Section, wanted: Section) -> bool:
    """Same markers and the same Q/A pairs (layout and trailing blank lines may differ)."""
    if (present.type, present.adapter, present.markers) != (wanted.type, wanted.adapter, wanted.markers):
        return False
    if present.body == wanted.body:
        return True
    try:
        return present.qa_pairs() == wanted.qa_pairs()
    except DocumentError:
        return False


def document_router(cfg: SpecConfig) -> DocumentRouter:
    """Example → document, from ``[probes]`` of ``cfg`` (the daemon's :class:`~learnerd.daemon.config.Config`;
    relative names under the first docs root)."""
    return DocumentRouter(cfg.probes.document, cfg.probes.by_language, cfg.layout.docs_base)


class ProbesHooks(TypedDict, total=False):
    """The probes reconciler's test hooks."""

    before_replace: Callable[[], None] | None
    monotonic: Callable[[], float]


def probes_reconciler(
    cfg: SpecConfig, router: DocumentRouter | None = None, **hooks: Unpack[ProbesHooks]
) -> ProbesReconciler:
    """The probes reconciler of ``cfg`` (``hooks``: its test hooks, ``before_replace`` / ``monotonic``)."""
    return ProbesReconciler(
        router or document_router(cfg),
        db_path=cfg.layout.store_target,
        base_model=cfg.probes.base_model,
        broken_document_retry_s=cfg.probes.broken_document_retry_s,
        rewrite_interval_s=cfg.probes.rewrite_interval_s,
        rollover_bytes=cfg.probes.rollover_bytes,
        **hooks,
    )


def _documents_of(wiring: Wiring, change: ExampleChange) -> list[str]:
    """The documents a changed example left and joined (its old and new routes)."""
    return [str(wiring.router.route(e)) for e in (change.old, change.new) if e is not None]


#: Examples → probe sections: the documents an example left or joined are rewritten.
SPEC = ControllerSpec(
    ProbesReconciler.name,
    lambda wiring: probes_reconciler(wiring.cfg, wiring.router),
    watches=(Watch(EXAMPLES, _documents_of),),
)
