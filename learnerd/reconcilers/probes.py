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
    update_document,
)
from learnerd.store.examples import EXAMPLE_SOURCE_PREFIX, Example, list_examples
from learnerd.store.routing import DocumentRouter
from learnerd.training.recipes import default_training

log = structlog.get_logger(__name__)

SOURCE_PREFIX = EXAMPLE_SOURCE_PREFIX
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
        """The blocking reconcile (see the module docstring).

        Raises:
            DocumentError: the document does not parse.
            ConflictError: the document changed under every write attempt (the caller retries).
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
        self._refused[key] = dict(refused)
        if not wanted and not path.exists():
            return ProbesOutcome(path, refused=tuple(refused))

        counts: list[ProbesOutcome] = []

        def edit(document: Document) -> Document:
            present = {s.harvest_source: s for s in reversed(document.auto_sections(SOURCE_PREFIX))}
            unchanged = sum(1 for src, s in wanted.items() if src in present and _same_probe(present[src], s))
            kept = sum(1 for src in present if src in wanted)
            counts.append(
                ProbesOutcome(
                    path,
                    added=len(wanted) - kept,
                    replaced=kept - unchanged,
                    removed=len(document.auto_sections(SOURCE_PREFIX)) - kept,
                    unchanged=unchanged,
                    refused=tuple(refused),
                )
            )
            return document.sync_auto_sections(SOURCE_PREFIX, wanted, same=_same_probe)

        create = None
        if wanted:
            path.parent.mkdir(parents=True, exist_ok=True)

            def create() -> Document:
                return new_document(
                    self._base_model,
                    prose=_NEW_DOCUMENT_PROSE,
                    training=default_training(self._base_model),
                    path=path,
                )

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
            path=key,
            added=result.added,
            replaced=result.replaced,
            removed=result.removed,
            unchanged=result.unchanged,
            refused=len(refused),
            written=result.written,
            attempts=outcome.attempts,
        )
        return result


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
