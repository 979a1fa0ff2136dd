"""Property: whatever a log line holds (arbitrary bytes, arbitrary JSON values, objects shaped like a
block-log event, a foyle line, a Claude Code or Codex line or an OTLP/JSON export with arbitrary fields),
ingestion goes on to the next good line, and the bad line is counted (as malformed when it is not a JSON
object) and named with its line; and whatever an atuin ``history.db`` row holds, the same for rows."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.analyzer import Harness
from tests.support.hostile_lines import atuin_rows, check_file, check_history, hostile_lines

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(bad=st.lists(hostile_lines, min_size=1, max_size=8))
def test_ingestion_goes_on_past_any_line_and_counts_it(bad: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        harness = Harness(Path(tmp), [logs])
        try:
            with harness.analyzer() as analyzer:
                anyio.run(check_file, analyzer, harness.conn, logs / "a.jsonl", bad, 0)
        finally:
            harness.conn.close()


@PROPERTY
@given(bad=st.lists(atuin_rows, min_size=1, max_size=8))
def test_ingestion_goes_on_past_any_atuin_row_and_counts_it(bad: list[dict]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        harness = Harness(Path(tmp), [logs])
        try:
            with harness.analyzer() as analyzer:
                anyio.run(check_history, analyzer, harness.conn, logs / "history.db", bad, 0)
        finally:
            harness.conn.close()
