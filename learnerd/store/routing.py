"""Which ``.dlm`` document an example's probe section belongs in (the ``[probes]`` routing rule).

``by_language[example.language]`` if set, else ``document``; a relative name resolves against ``base``
(the first of ``docs_dirs``, else ``<state_dir>/docs``: :attr:`learnerd.store.layout.StateLayout.docs_base`).
The probes workqueue's key for an example is ``str(router.route(example))``.

**Rollover.** A routed document near the size learnerd parses (:data:`~learnerd.store.dlm.document.MAX_DOCUMENT_BYTES`)
takes no new sections: they go to ``<stem>-2<suffix>`` beside it (``learned.dlm`` → ``learned-2.dlm``), then
``-3`` and so on (:func:`rollover_path`). The routed document and its rollovers are its *chain*
(:func:`rollover_chain`); the probes reconciler fills it (:mod:`learnerd.reconcilers.probes`), and each
document of it trains, serves and is forgotten in as any other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from learnerd.store.examples import Example


def rollover_path(document: Path, number: int) -> Path:
    """The ``number``-th document of ``document``'s chain (``number`` >= 2): ``learned.dlm`` → ``learned-2.dlm``."""
    return document.with_name(f"{document.stem}-{number}{document.suffix}")


def _rollover_name(document: Path) -> re.Pattern[str]:
    return re.compile(re.escape(document.stem) + r"-([2-9]|[1-9]\d+)" + re.escape(document.suffix))


def rollover_chain(document: Path) -> list[Path]:
    """``document`` and its existing rollover documents (``<stem>-N<suffix>``, N >= 2, in the same directory),
    in order of N."""
    pattern = _rollover_name(document)
    try:
        names = os.listdir(document.parent)
    except OSError:
        names = []
    numbered = sorted((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name)))
    return [document, *(document.parent / name for _, name in numbered)]


def in_chain(path: Path, document: Path) -> bool:
    """Whether ``path`` is ``document`` or names one of its rollovers (whether or not it exists)."""
    return path == document or (path.parent == document.parent and bool(_rollover_name(document).fullmatch(path.name)))


class DocumentRouter:
    """Example → document path.

    Args:
        document: the default document's name or path.
        by_language: example language → document name or path.
        base: where a relative name resolves.
    """

    def __init__(self, document: str, by_language: Mapping[str, str], base: Path) -> None:
        self._document = document
        self._by_language = dict(by_language)
        self._base = base

    def route(self, example: Example) -> Path:
        """The document ``example``'s probe section belongs in."""
        return self.resolve(self._by_language.get(example.language, self._document))

    def documents(self) -> list[Path]:
        """Every document a route can name, without duplicates."""
        return list(dict.fromkeys(self.resolve(n) for n in [self._document, *self._by_language.values()]))

    def resolve(self, name: str) -> Path:
        """A document name as the config writes it → its path (absolute as is, else under ``base``)."""
        p = Path(os.path.expandvars(os.path.expanduser(name)))
        return p if p.is_absolute() else self._base / p


class DocumentScope:
    """The documents learnerd may write: those under ``roots`` (``docs_dirs``) and the named ``documents``
    (``[rpc] document``, ``[probes]`` documents), compared after resolving symlinks and ``..``."""

    def __init__(self, roots: Sequence[Path], documents: Sequence[Path] = ()) -> None:
        self._roots = tuple(Path(os.path.realpath(r)) for r in roots)
        self._documents = frozenset(Path(os.path.realpath(d)) for d in documents)

    def __call__(self, document: str) -> bool:
        """Whether ``document`` (an absolute path) is in scope."""
        if not os.path.isabs(document):
            return False
        path = Path(os.path.realpath(document))
        return path in self._documents or any(path.is_relative_to(root) for root in self._roots)
