"""Which ``.dlm`` document an example's probe section belongs in (the ``[probes]`` routing rule).

``by_language[example.language]`` if set, else ``document``; a relative name resolves against ``base``
(the first of ``docs_dirs``, else ``<state_dir>/docs``: :attr:`learnerd.store.layout.StateLayout.docs_base`).
The probes workqueue's key for an example is ``str(router.route(example))``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
