"""The analyzer's counters: a plain snapshot for the admin status and ``run --once``, and the same
numbers as prometheus-client metrics on an injected registry.

Metric names (prometheus-client adds ``_total`` to counters on exposition):

- ``learnerd_analyzer_files_tracked`` (gauge): log files being tailed now.
- ``learnerd_analyzer_pending_traces`` (gauge): foyle traces waiting for their other half.
- ``learnerd_analyzer_lines_read_total``: lines consumed, whatever became of them.
- ``learnerd_analyzer_bytes_read_total``: bytes consumed, line feeds included.
- ``learnerd_analyzer_blocks_changed_total``: block rows changed (a row counts once per batch).
- ``learnerd_analyzer_traces_joined_total``: foyle traces joined to their blocks.
- ``learnerd_analyzer_malformed_lines_total``: lines refused (bad UTF-8, JSON or fields).
- ``learnerd_analyzer_unknown_events_total``: well-formed events of an unknown type or version.
- ``learnerd_analyzer_oversized_lines_total``: lines over ``max_line_bytes``, skipped unread.
- ``learnerd_analyzer_refused_events_total``: block events refused (a time more than a day after now, or
  a block id another source made: :class:`~learnerd.store.blocks.BlockRefused`), skipped.
- ``learnerd_analyzer_skipped_lines_total``: foyle lines (and learnerd's own log lines) that carry
  nothing learnerd uses.
- ``learnerd_analyzer_foreign_lines_total``: valid JSON from another program (not a block log), and
  the lines of JSON documents (a pretty-printed ``.json`` file), skipped.
- ``learnerd_analyzer_unjoinable_traces_total{reason}``: foyle traces or events that name no block.
- ``learnerd_analyzer_truncations_total``: files read again from the start (shorter than their
  watermark, or rewritten in place).
- ``learnerd_analyzer_rotations_total``: paths found naming a new file (the old one finished first).
- ``learnerd_analyzer_deleted_files_total``: tracked files that disappeared.
- ``learnerd_analyzer_rescans_total``: full rescans of the log directories (listing every directory
  and checking every tracked file); while the watcher runs, one per ``rescan_interval_s``.
- ``learnerd_analyzer_errors_total``: passes or files that failed (I/O, database) and will be retried.
- ``learnerd_analyzer_rejected_attempts_total{format}``: failed commands an assistant's session corrected
  (a later command of the session succeeded), each kept as that block's rejected attempt — the negatives
  (:mod:`learnerd.analyzer.sessions`); ``format`` is the reader's name (``claude-code``, ``codex``, …).
- ``learnerd_analyzer_rejected_suggestions_total{format}``: blocks that became rejected suggestions (a tool
  call the person denied; a suggestion foyle logged as rejected).
  Both count what this process recorded anew (a line read again counts nothing);
  ``rejected_attempts`` and ``rejected_suggestions`` (format → count) in the snapshot.
- ``learnerd_redactions_total{kind}``: secrets replaced by a typed placeholder before storage
  (:mod:`learnerd.privacy.redact`); ``redactions`` in the snapshot.

The snapshot also names the last malformed line (``last_malformed``: file, line, reason, epoch
seconds) and the last file that failed (``last_error``), for ``learnerd ctl status``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

_PREFIX = "learnerd_analyzer_"

# field name → help text, for every counter field of AnalyzerStats (unjoinable_traces is labelled).
_COUNTERS = {
    "lines_read": "Log lines consumed.",
    "bytes_read": "Log bytes consumed, line feeds included.",
    "blocks_changed": "Block rows changed by ingestion.",
    "traces_joined": "foyle traces joined to their blocks.",
    "malformed_lines": "Log lines refused as malformed (bad UTF-8, JSON or fields).",
    "unknown_events": "Well-formed events of an unknown type or format version.",
    "oversized_lines": "Log lines longer than max_line_bytes, skipped unread.",
    "refused_events": "Block events refused: a time more than a day ahead, or a block of another source.",
    "skipped_lines": "foyle log lines (and learnerd's own) that carry nothing learnerd uses.",
    "foreign_lines": "Valid JSON lines from another program (not a block log), skipped.",
    "truncations": "Log files read again from the start (truncated or replaced in place).",
    "rotations": "Log paths found naming a new file; the old one was finished first.",
    "deleted_files": "Tracked log files that disappeared.",
    "rescans": "Full rescans of the log directories.",
    "errors": "Analyzer passes that failed and will be retried.",
}


# field name → help text, for the counters of AnalyzerStats labelled by format (a reader's name).
_BY_FORMAT = {
    "rejected_attempts": "Failed commands an assistant's session corrected, kept as rejected attempts.",
    "rejected_suggestions": "Blocks that became rejected suggestions (the person denied the tool call).",
}


@dataclass(frozen=True)
class LineProblem:
    """Where and why a line (or a file) was refused: ``file`` path, 1-based ``line`` (the line the
    file's watermark stood at, for a file that failed), ``reason``, ``at`` in epoch seconds."""

    file: str
    line: int
    reason: str
    at: float


@dataclass
class AnalyzerStats:
    """Counts since this :class:`~learnerd.analyzer.analyzer.Analyzer` was made (bytes in bytes, the rest in
    lines, files, traces or rows); ``unjoinable_traces`` maps a reason to a count, ``redactions`` a
    placeholder kind, ``rejected_attempts`` and ``rejected_suggestions`` a format (reader name)."""

    files_tracked: int = 0
    pending_traces: int = 0
    lines_read: int = 0
    bytes_read: int = 0
    blocks_changed: int = 0
    traces_joined: int = 0
    malformed_lines: int = 0
    unknown_events: int = 0
    oversized_lines: int = 0
    refused_events: int = 0
    skipped_lines: int = 0
    foreign_lines: int = 0
    unjoinable_traces: dict[str, int] = field(default_factory=dict)
    redactions: dict[str, int] = field(default_factory=dict)
    rejected_attempts: dict[str, int] = field(default_factory=dict)
    rejected_suggestions: dict[str, int] = field(default_factory=dict)
    truncations: int = 0
    rotations: int = 0
    deleted_files: int = 0
    rescans: int = 0
    errors: int = 0
    last_malformed: LineProblem | None = None
    last_error: LineProblem | None = None


class StatsRecorder:
    """Keeps an :class:`AnalyzerStats` and mirrors every change into prometheus metrics.

    ``registry`` None gives a private registry nobody scrapes (metrics off).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._stats = AnalyzerStats()
        self._counters = {name: Counter(_PREFIX + name, doc, registry=reg) for name, doc in _COUNTERS.items()}
        self._unjoinable = Counter(
            _PREFIX + "unjoinable_traces", "foyle traces or events that name no known block.", ["reason"], registry=reg
        )
        self._redactions = Counter(
            "learnerd_redactions", "Secrets replaced by typed placeholders before storage.", ["kind"], registry=reg
        )
        self._rejected = {
            name: Counter(_PREFIX + name, doc, ["format"], registry=reg) for name, doc in _BY_FORMAT.items()
        }
        self._files = Gauge(_PREFIX + "files_tracked", "Log files being tailed.", registry=reg)
        self._pending = Gauge(_PREFIX + "pending_traces", "foyle traces waiting for their other half.", registry=reg)

    def add(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name`` (a key of the module's counter table)."""
        if amount:
            setattr(self._stats, name, getattr(self._stats, name) + amount)
            self._counters[name].inc(amount)

    def unjoinable(self, reason: str) -> None:
        self._stats.unjoinable_traces[reason] = self._stats.unjoinable_traces.get(reason, 0) + 1
        self._unjoinable.labels(reason=reason).inc()

    def redacted(self, kinds: Mapping[str, int]) -> None:
        """Count secrets replaced by placeholders, by kind (``AWS_SECRET_ACCESS_KEY``, ``BEARER_TOKEN``, …)."""
        for kind, n in kinds.items():
            self._stats.redactions[kind] = self._stats.redactions.get(kind, 0) + n
            self._redactions.labels(kind=kind).inc(n)

    def by_format(self, name: str, reader: str, amount: int) -> None:
        """Add ``amount`` to the counter ``name`` (``rejected_attempts`` or ``rejected_suggestions``) of the
        format ``reader``."""
        if amount:
            counts = getattr(self._stats, name)
            counts[reader] = counts.get(reader, 0) + amount
            self._rejected[name].labels(format=reader).inc(amount)

    def problem(self, kind: str, problem: LineProblem) -> None:
        """Remember ``problem`` as the last ``"malformed"`` line or the last ``"error"`` of a file."""
        setattr(self._stats, f"last_{kind}", problem)

    def set_files_tracked(self, n: int) -> None:
        self._stats.files_tracked = n
        self._files.set(n)

    def set_pending_traces(self, n: int) -> None:
        self._stats.pending_traces = n
        self._pending.set(n)

    def snapshot(self) -> AnalyzerStats:
        """A copy of the counts, safe to keep."""
        return copy.deepcopy(self._stats)
