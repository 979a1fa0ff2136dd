"""Helpers for analyzer tests: a real database, a recording notifier, a controllable clock."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from learnerd.analyzer.analyzer import Analyzer
from learnerd.analyzer.ingest import parse_record
from learnerd.analyzer.reader import Reader
from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.store.db import connect, transaction


@dataclass
class Clock:
    """A wall clock that only moves when told to (epoch seconds)."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 1.0) -> None:
        self.now += seconds


@dataclass
class Harness:
    """One database, one notify log and a clock shared by every analyzer a test makes."""

    tmp_path: Path
    log_dirs: list[Path]
    notified: list[str] = field(default_factory=list)
    clock: Clock = field(default_factory=Clock)

    def __post_init__(self) -> None:
        self.conn = connect(self.tmp_path / "state" / "learnerd.db")

    def analyzer(self, notify: Callable[[str], None] | None = None, **config: Any) -> Analyzer:
        """A new analyzer on the shared database; ``notify`` defaults to recording in ``notified``."""
        return Analyzer(
            self.conn, self.log_dirs, notify or self.notified.append, AnalyzerConfig(**config), clock=self.clock
        )

    async def wait_notified(self, *block_ids: str, timeout: float = 10.0) -> None:
        """Wait until every one of ``block_ids`` has been notified (generous timeout: no timing claims)."""
        with anyio.fail_after(timeout):
            while not set(block_ids) <= set(self.notified):
                await anyio.sleep(0.01)

    def take_notified(self) -> list[str]:
        out, self.notified[:] = list(self.notified), []
        return out

    def watermark(self, path: Path) -> tuple[int, int] | None:
        """(offset, line) of ``path``'s watermark, or None."""
        row = self.conn.execute("SELECT offset, line FROM watermarks WHERE path = ?", (os.fspath(path),)).fetchone()
        return (row[0], row[1]) if row else None


def append(path: Path, text: str | bytes) -> None:
    """Append to ``path`` as a log writer would (one write)."""
    data = text.encode() if isinstance(text, str) else text
    with open(path, "ab") as f:
        f.write(data)


@contextlib.contextmanager
def captured_logs() -> Iterator[list[dict]]:
    """Every structlog event, debug included, as dicts (whatever level another test configured)."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**old)


LATER = 2_000_000_000.0
"""A clock after every sample's events (an event more than a day after the clock is refused)."""


def assert_reads_keeps_what_parse_reads(reader: Reader, files: list[Path], tmp_path: Path) -> None:
    """Every line of ``files`` through ``reader`` as the intake gives it (only the part ``reader.reads``
    keeps) and whole, each on its own store: the same result per line and the same blocks and sessions."""
    assert reader.reads is not None and files
    stores = {"part": connect(tmp_path / "part.db"), "whole": connect(tmp_path / "whole.db")}
    readers = {"part": reader, "whole": dataclasses.replace(reader, reads=None)}
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            results = {}
            for name, conn in stores.items():
                with transaction(conn):
                    results[name] = parse_record(conn, readers[name], json.loads(line), LATER, None, str(path), None)
            assert results["part"] == results["whole"], f"{path.name}:{number}"
    for table in ("blocks", "assistant_sessions", "rejected_attempts"):
        part, whole = (sorted(map(tuple, c.execute(f"SELECT * FROM {table}"))) for c in stores.values())
        assert part == whole and part, table
