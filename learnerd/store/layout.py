"""The state directory's layout: the one place that spells where learnerd keeps its files.

::

    <state_dir>/                      mode 0700
        learnerd.db                   the SQLite database (WAL mode), ``[store]``'s embedded default (``[store]
                                      url`` may name another file, or a PostgreSQL database: docs/fleet.md)
        learnerd.sock                 the admin API's Unix socket (0600)
        adapters/<dlm_id>/vNNNN/      the versioned adapter store (``learnerd.store.adapters``), unless
                                      ``[store] adapters_dir`` names a shared one
        models/                       built and converted base models (``learnerd.ml``)
        journals/injected-probes.jsonl  probes accepted over RPC, not yet in their document
        ingest/http-YYYYMMDD.jsonl    block-log events accepted by ``POST /v1/blocks`` (``learnerd.store.ingest_log``),
                                      one file per UTC day; the analyzer tails this directory beside ``log_dirs``
        paused-controllers.json       the controllers ``learnerd ctl pause`` paused (kept across restarts)
        steering/                     vocabulary clusters and ``learnerd evolve`` runs
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
        store_url: ``[store] url``: "" (the file under ``root``), a SQLite path, or a PostgreSQL URL.
        shared_adapters_dir: ``[store] adapters_dir`` (None: ``<root>/adapters``).
    """

    root: Path
    docs_dirs: tuple[Path, ...] = ()
    store_url: str = ""
    shared_adapters_dir: Path | None = None

    @property
    def is_postgres(self) -> bool:
        """True when the store is a PostgreSQL database."""
        return self.store_url.startswith(("postgresql://", "postgres://"))

    @property
    def db_path(self) -> Path:
        """The SQLite file (``[store] url`` when it is a path)."""
        return Path(self.store_url) if self.store_url and not self.is_postgres else self.root / "learnerd.db"

    @property
    def store_target(self) -> str | Path:
        """What :func:`learnerd.store.db.connect` opens: the PostgreSQL URL, else :attr:`db_path`."""
        return self.store_url if self.is_postgres else self.db_path

    @property
    def socket_path(self) -> Path:
        """The admin API's Unix socket."""
        return self.root / "learnerd.sock"

    @property
    def adapters_dir(self) -> Path:
        """Root of the versioned adapter store (``learnerd.store.adapters``)."""
        return self.shared_adapters_dir or self.root / "adapters"

    @property
    def models_dir(self) -> Path:
        """Where built-in and converted base models are built and cached (``learnerd.ml``)."""
        return self.root / "models"

    @property
    def probe_journal(self) -> Path:
        """The journal of probes accepted over RPC (``learnerd.store.probe_journal``)."""
        return self.root / "journals" / "injected-probes.jsonl"

    @property
    def ingest_dir(self) -> Path:
        """The block-log files learnerd writes itself (events accepted over HTTP, ``learnerd.store.ingest_log``);
        the analyzer tails it as one more log directory."""
        return self.root / "ingest"

    @property
    def paused_controllers(self) -> Path:
        """The controllers ``learnerd ctl pause`` paused, a JSON array of names: they stay paused across a
        restart until ``learnerd ctl resume``."""
        return self.root / "paused-controllers.json"

    @property
    def steering_dir(self) -> Path:
        """Vocabulary-cluster caches and ``learnerd evolve`` run directories (``learnerd.steering``)."""
        return self.root / "steering"

    @property
    def docs_roots(self) -> tuple[Path, ...]:
        """The directories of ``.dlm`` documents: ``docs_dirs``, else ``<root>/docs``."""
        return self.docs_dirs or (self.root / "docs",)

    @property
    def docs_base(self) -> Path:
        """Where a relative document name resolves: the first of :attr:`docs_roots`."""
        return self.docs_roots[0]
