"""``[analyzer]``: how the analyzer tails log files (:mod:`learnerd.analyzer.analyzer`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from learnerd.sections import Section


class AnalyzerConfig(Section):
    """How log files are tailed: sizes in bytes, times in seconds.

    ``max_line_bytes`` defaults to 4 MiB: five times the longest line foyle's author observed in real
    logs (772,685 characters, a whole markdown document in one trace), small enough that parsing one
    line stays cheap.
    """

    poll_interval_s: float = Field(1.0, gt=0)
    """log directories appearing; full rescan period when polling only"""
    rescan_interval_s: float = Field(300.0, gt=0)
    """full rescan period while watchfiles runs (the safety net for missed events)"""
    force_polling: bool = False
    """rescans only, no watchfiles (network file systems, containers)"""
    debounce_ms: int = Field(50, ge=1)
    """watchfiles' debounce: how long a burst of changes is gathered"""
    max_line_bytes: int = Field(4 * 1024 * 1024, ge=1)
    """longer lines are counted, logged and skipped unread"""
    batch_max_lines: int = Field(1000, ge=1)
    """lines per transaction (one transaction = blocks + watermark)"""
    batch_max_bytes: int = Field(1024 * 1024, ge=1)
    """bytes per transaction (a single longer line is its own batch)"""
    max_open_files: int = Field(128, ge=1)
    """log files held open (to finish rotated or deleted files)"""
    formats: list[str] = Field(default_factory=list)
    """the only log formats read (empty: every format, each detected per record; docs/inputs.md)"""

    @field_validator("formats")
    @classmethod
    def _known_formats(cls, value: list[str]) -> list[str]:
        from learnerd.analyzer.registry import names  # the registry imports every reader: only when set

        unknown = [name for name in value if name not in names()]
        if unknown:
            raise ValueError(f"unknown formats {unknown}: known are {', '.join(names())}")
        return value
