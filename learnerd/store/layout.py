"""The state directory's layout: the one place that spells where learnerd keeps its files.

::

    <state_dir>/                      mode 0700
        learnerd.db                   the SQLite database (WAL mode), ``[store]``'s embedded default
        learnerd.sock                 the admin API's Unix socket (0600)
        adapters/<dlm_id>/vNNNN/      the versioned adapter store (``learnerd.store.adapters``)
        models/                       built and converted base models (``learnerd.ml``)
        journals/injected-probes.jsonl  probes accepted over RPC, not yet in their document
        docs/                         the documents learnerd writes when no ``docs_dirs`` is configured
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StateLayout:
    """Paths under one state directory (``root``) and the configured document roots.

    Args:
        root: the state directory.
        docs_dirs: the configured ``docs_dirs`` (may be empty: then ``<root>/docs`` serves).
    """

    root: Path
    docs_dirs: tuple[Path, ...] = ()

    @property
    def db_path(self) -> Path:
        return self.root / "learnerd.db"

    @property
    def admin_socket(self) -> Path:
        return self.root / "learnerd.sock"

    @property
    def adapters_dir(self) -> Path:
        """Root of the versioned adapter store (``learnerd.store.adapters``)."""
        return self.root / "adapters"

    @property
    def models_dir(self) -> Path:
        """Where built-in and converted base models are built and cached (``learnerd.ml``)."""
        return self.root / "models"

    @property
    def probe_journal(self) -> Path:
        """The journal of probes accepted over RPC (``learnerd.store.probe_journal``)."""
        return self.root / "journals" / "injected-probes.jsonl"

    @property
    def docs_roots(self) -> tuple[Path, ...]:
        """The directories of ``.dlm`` documents: ``docs_dirs``, else ``<root>/docs``."""
        return self.docs_dirs or (self.root / "docs",)

    @property
    def docs_base(self) -> Path:
        """Where a relative document name resolves: the first of :attr:`docs_roots`."""
        return self.docs_roots[0]
