"""The reader contract: what one log format declares so that the analyzer reads it.

A log format is one module of this package defining a :class:`Reader` (by convention ``READER``) and
one row in :data:`learnerd.analyzer.registry.READERS`. Everything else is the analyzer's and the same
for every format: finding the files, tailing them from a persisted watermark, committing each batch's
blocks with its watermark in one transaction, counting and logging bad records, merging block events
into ``blocks`` (the one intake, in :mod:`learnerd.analyzer.ingest`) and notifying.

A reader says:

- ``name``: what the format is called in logs and reasons (``"blocklog"``, ``"foyle"``).
- ``framing``: how the files holding it are found and cut into records, and so what their watermark
  counts: :data:`JSON_LINES` (byte offsets) or :data:`SQLITE_ROWS` (a table's rows of a SQLite database,
  read read-only, watermarked by rowid: atuin's ``history.db``).
- ``detect(record) -> bool``: whether a record is in this format, judged from the record alone (no
  configuration). A framing's records are offered to its readers in registry order and the first
  that detects a record parses it, so one file may mix formats; a record that no reader detects is
  *foreign* (another program's: counted, warned about once per file, skipped).
- ``parse(conn, record, now) -> Parsed``: what the record says, as block events for the intake to
  merge. It runs inside the batch's transaction, under a savepoint of its own: it may keep state in
  the store (foyle keeps the first half of a trace until the other half arrives) and a failure
  rolls that back. It never writes ``blocks`` itself. It raises
  :class:`~learnerd.analyzer.fields.MalformedLine` for a record with missing or ill-typed fields and
  :class:`~learnerd.analyzer.fields.UnknownEvent` for a well-formed record of a kind or version it
  does not know; any other exception also makes the record malformed, except a database failure,
  which rolls the batch back for a retry.
- ``file_scoped`` (optional, default False): the format names its session only in a file's first record
  (Codex CLI's ``session_meta``), so its state is kept per file: ``parse`` is then called with the path of
  the record's file as a fourth argument.
- ``holds(record, now) -> bool`` (optional, :data:`SQLITE_ROWS` only): see the field.
- ``columns`` (:data:`SQLITE_ROWS` only): the columns ``detect`` and ``parse`` read; only these are selected
  (:mod:`learnerd.analyzer.sqlite_source`: never ``*``), and a column the table lacks reads as missing.
- ``reads(record) -> record`` (optional): the part of a record ``parse`` reads, the only part redacted; see
  the field.
- ``pending(conn) -> int`` (optional): how many records the format keeps in the store waiting for
  another record (the ``pending_traces`` gauge sums them); None for a format that never waits.
- ``resolves_served`` (optional, default False): see the field.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from learnerd.store.blocks import BlockEvent

Record = dict[str, Any]
"""One record of a format: a JSON object for the :data:`JSON_LINES` framing, a row (column → value, with
the row's ``rowid`` under :data:`ROWID`) for :data:`SQLITE_ROWS`."""

ROWID = "_rowid"
"""The key of a :data:`SQLITE_ROWS` record's rowid."""

# What one record amounted to (``Parsed.kind``).
EVENTS = "events"  # block events for the intake (``joined``: they complete a trace)
PENDING = "pending"  # part of a trace, kept in the store for the rest (``trace_id`` names it)
SKIPPED = "skipped"  # a record of the format that carries nothing learnerd uses
UNJOINABLE = "unjoinable"  # a record (or the trace it completed) that names no block (``reason``: why)


@dataclass
class Parsed:
    """What a reader made of one record: ``kind`` is one of :data:`EVENTS`, :data:`PENDING`,
    :data:`SKIPPED`, :data:`UNJOINABLE`; ``events`` (for :data:`EVENTS`) are not yet merged;
    ``joined`` is True when they complete a trace of several records; ``reason`` says why a record is
    unjoinable (a short label, counted per label); ``trace_id`` names the trace a record completed or
    left pending (``""`` when none)."""

    kind: str
    events: list[BlockEvent] = field(default_factory=list)
    joined: bool = False
    reason: str = ""
    trace_id: str = ""


@dataclass(frozen=True)
class Framing:
    """How the files holding a format are found and cut into records, and so what their watermark counts.

    ``suffixes``: a regular file whose name ends in one of these (any case) is read in this framing;
    :mod:`learnerd.analyzer.discovery` says what is left out whatever its name. ``table``: for a SQLite
    framing, the table whose rows are the records (``""`` for a framing of lines).
    """

    suffixes: tuple[str, ...]
    table: str = ""


JSON_LINES = Framing(suffixes=(".jsonl", ".json", ".log"))
"""One UTF-8 JSON object per LF-terminated line (:mod:`learnerd.analyzer.tail` reads the lines,
:mod:`learnerd.analyzer.ingest` decodes them); a file's watermark is the byte offset just past its last
consumed line, with the line count, its inode and a fingerprint of its first bytes
(:mod:`learnerd.store.watermarks`). foyle names its logs ``foyle.logs.<timestamp>.json``; learnerd's
block logs conventionally end in ``.jsonl``."""


SQLITE_ROWS = Framing(suffixes=(".db",), table="history")
"""The rows of the ``history`` table of a SQLite database (:mod:`learnerd.analyzer.sqlite_source` reads
them read-only, in rowid order); a file's watermark is the last rowid read and the number of rows read,
with its inode (no fingerprint: SQLite rewrites its header at every write). A vacuum may renumber the rows
of a table without an ``INTEGER PRIMARY KEY``: a file whose largest rowid falls below its watermark is
read again from the start, which merges nothing twice (block ids come from the rows' own ids)."""

FRAMINGS: tuple[Framing, ...] = (JSON_LINES, SQLITE_ROWS)


def framing_of(name: str) -> Framing | None:
    """The framing a file name (or path) is read in, by its suffix; None for none."""
    lowered = name.lower()
    return next((f for f in FRAMINGS if lowered.endswith(f.suffixes)), None)


@dataclass(frozen=True)
class Reader:
    """One log format (see the module docstring for each field's contract)."""

    name: str
    framing: Framing
    detect: Callable[[Record], bool]
    parse: Callable[..., Parsed]
    """``(conn, record, now) -> Parsed``, or ``(conn, record, now, path) -> Parsed`` when ``file_scoped``."""
    pending: Callable[[sqlite3.Connection], int] | None = None
    file_scoped: bool = False
    reads: Callable[[Record], Record] | None = None
    """``(record) -> record``: the part of a record ``parse`` reads (None: all of it). The intake redacts
    that part only, then parses it, so a format whose records are mostly what learnerd never uses (tool
    outputs, token counts, reasoning) does not pay the secret redactor for them. It must keep every field
    ``parse`` reads, as it is (a projection: ``parse(reads(r))`` says what ``parse(r)`` says), and never raise
    on a record ``detect`` accepted."""
    holds: Callable[[Record, float], bool] | None = None
    """``(record, now) -> bool``, for a :data:`SQLITE_ROWS` format whose rows change after they are written
    (atuin's row of a command still running): True stops the batch before the record until it no longer
    holds, so the watermark does not pass it."""
    resolves_served: bool = False
    """Whether the format's executions resolve the answers learnerd served in the same session
    (:func:`learnerd.store.suggestions.resolve`): only a format whose sessions learnerd's own clients name, as
    they name the session of their chat requests (learnerd's block log, written by ``POST /v1/blocks`` and the
    integrations). Another program's sessions (an assistant's transcript, a shell history) are that program's: a
    client of the endpoint that claimed one must not turn its prompt into an example of that program's run."""
    columns: tuple[str, ...] = ()
    """For a :data:`SQLITE_ROWS` format, the columns its ``detect``, ``parse`` and ``holds`` read: the only ones
    selected (a generated column, or one the table lacks, is left out of the record)."""
