"""Which ``.dlm`` document an example's probe section belongs in (the ``[probes]`` routing rule).

``by_language[example.language]`` if set, else ``document``; a relative name resolves against ``base``
(the first of ``docs_dirs``, else ``<state_dir>/docs``: :attr:`learnerd.store.layout.StateLayout.docs_base`).
The probes workqueue's key for an example is ``str(router.route(example))``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from learnerd.store.examples import Example


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
