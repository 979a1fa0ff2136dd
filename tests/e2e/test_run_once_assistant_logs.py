"""``learnerd run --once --log-dir <a copy of ../shared/peer-data/assistant-logs>`` on a fresh state: examples
from every format (Claude Code, Codex CLI, atuin, OpenTelemetry GenAI), ``learnerd search`` finds a command
of each, and ``learnerd sources`` lists every file with its detected format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.assistant_logs import OTEL_FIXTURE as FIXTURE
from tests.support.assistant_logs import build_history
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_once, table_rows

pytestmark = pytest.mark.slow

# query → (source prefix of the block id, the command it learned), one per format
SEARCHES = {
    "How much space do the logs under /var/log take?": ("otel:", "du -sh /var/log"),
    "Rebuild with the lockfile to confirm the fix": ("atuin:", "cargo build --release --locked"),
    "show tools": ("codex:", "sed -n '1,180p' /Users/Sample_User/.codex/plugins/cache/openai-curated/superpowers/"),
    "Create TypeScript types and interfaces for a TODO app": ("claude-code:", ""),
}


def test_run_once_learns_from_every_assistant_format_and_search_finds_each(peer_copy, peer_data, tmp_path: Path):
    logs = peer_copy("assistant-logs")
    build_history(peer_data, logs / "atuin")
    shutil.copy(FIXTURE, logs / "otel-genai" / FIXTURE.name)
    state = tmp_path / "state"

    summary = run_once(state, logs)
    assert summary["analyzer"]["malformed_lines"] == 0 and summary["analyzer"]["errors"] == 0
    assert summary["analyzer"]["rejected_attempts"] == {"claude-code": 9, "codex": 5, "otel-genai": 1}
    learned = dict(
        table_rows(state, "SELECT b.source, count(*) FROM examples e JOIN blocks b ON b.id = e.id GROUP BY 1")
    )
    assert set(learned) == {"claude-code", "codex", "atuin", "otel"} and all(n > 0 for n in learned.values())

    for query, (prefix, command) in SEARCHES.items():  # in this process: one torch import and MiniLM load, not four
        hits = json.loads(run_cli_here("search", query, "-k", "1", "--json", "--state-dir", str(state)).stdout)
        assert hits and hits[0]["id"].startswith(prefix), (query, hits)
        assert hits[0]["answer"].startswith(command), (query, hits)

    sources = json.loads(run_cli_here("sources", "--json", "--state-dir", str(state)).stdout)
    formats = {Path(f["path"]).name: set(f["formats"]) for f in sources["files"]}
    assert formats["history.db"] == {"atuin"} and formats[FIXTURE.name] == {"otel-genai"}
    assert {n for n, f in formats.items() if f == {"claude-code"}} == {p.name for p in logs.glob("claude-code/*.jsonl")}
    assert {n for n, f in formats.items() if f == {"codex"}} == {p.name for p in logs.glob("codex/*.jsonl")}
    by_source = {s["source"]: s for s in sources["sources"]}
    assert by_source["claude-code"]["blocks"] == 63 and by_source["codex"]["blocks"] == 78
    assert by_source["atuin"]["blocks"] == 19 and by_source["otel"]["blocks"] == 5
    assert by_source["claude-code"]["rejected_attempts"] == 9 and by_source["codex"]["rejected_attempts"] == 5
