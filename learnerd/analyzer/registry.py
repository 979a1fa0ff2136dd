"""The log formats the analyzer reads: one :class:`~learnerd.analyzer.reader.Reader` per format.

Adding a format: write its module in this package, with a ``READER``, and add that reader to
:data:`READERS` (docs/architecture.md, "A log format"); nothing else changes. The analyzer reads the
tuple at every record, so a test may monkeypatch it.
"""

from __future__ import annotations

import sqlite3

from learnerd.analyzer import atuin, blocklog, claude_code, codex, foyle, otel_genai, own_log
from learnerd.analyzer.reader import Framing, Reader, Record

READERS: tuple[Reader, ...] = (
    blocklog.READER,
    foyle.READER,
    claude_code.READER,
    codex.READER,
    otel_genai.READER,
    atuin.READER,
    own_log.READER,
)
"""Every format, in the order a record is offered to them: the first whose ``detect`` accepts it
parses it. Order matters only for a record two formats would claim: the block log's ``learnerd`` key
wins over foyle's string ``message`` (Claude Code's ``message`` is an object), and every format over the
``event`` and ``level`` keys of learnerd's own log."""


def names() -> list[str]:
    """Every reader's name, in registry order (the values of ``[analyzer] formats``)."""
    return [reader.name for reader in READERS]


def reader_for(record: Record, framing: Framing, formats: frozenset[str] = frozenset()) -> Reader | None:
    """The first reader of ``framing`` in :data:`READERS` that detects ``record``; None when none does
    (the record is foreign). ``formats``, when not empty, names the only readers that may (``[analyzer]
    formats``)."""
    for reader in READERS:
        if formats and reader.name not in formats:
            continue
        if reader.framing is framing and reader.detect(record):
            return reader
    return None


def reader_names(framing: Framing) -> list[str]:
    """The names of the readers of ``framing``, in registry order (for the reason of a foreign record)."""
    return [reader.name for reader in READERS if reader.framing is framing]


def columns(framing: Framing) -> tuple[str, ...]:
    """Every column the readers of ``framing`` read (:attr:`~learnerd.analyzer.reader.Reader.columns`), without
    duplicates, in registry order: what a read of a SQLite log selects."""
    return tuple(dict.fromkeys(c for reader in READERS if reader.framing is framing for c in reader.columns))


def pending_records(conn: sqlite3.Connection) -> int:
    """Records every format keeps in the store waiting for another record (foyle's half traces).

    Raises:
        sqlite3.Error: the database failed.
    """
    return sum(reader.pending(conn) for reader in READERS if reader.pending is not None)
