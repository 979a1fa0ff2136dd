"""``learnerd sources`` as a real subprocess on a store the analyzer filled from the real assistant logs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cli_env, learnerd_command
from tests.support.analyzer import Harness
from tests.support.assistant_logs import OTEL_FIXTURE, build_history
from tests.support.pipeline import run_cli


@pytest.mark.anyio
async def test_sources_lists_each_file_with_its_format_and_the_blocks_per_source(peer_copy, peer_data, tmp_path):
    codex = peer_copy("assistant-logs/codex")
    logs = codex.parent
    build_history(peer_data, logs / "atuin")
    shutil.copy(OTEL_FIXTURE, logs / OTEL_FIXTURE.name)
    harness = Harness(tmp_path, [logs])  # its store is <tmp_path>/state/learnerd.db
    harness.clock.now = 1_800_000_000.0
    await harness.analyzer().sync()
    harness.conn.close()

    report = json.loads(run_cli("sources", "--json", "--state-dir", str(tmp_path / "state")).stdout)
    files = {Path(f["path"]).name: (f["formats"], f["records"]) for f in report["files"]}
    assert files == {
        "history.db": ({"atuin": 20}, 20),
        OTEL_FIXTURE.name: ({"otel-genai": 3}, 3),
        **{
            p.name: ({"codex": min(n, 200)}, n)
            for p, n in ((p, len(p.read_text().splitlines())) for p in codex.glob("*.jsonl"))
        },
    }
    assert report["sources"] == [
        {"source": "atuin", "blocks": 19, "failed": 7, "with_intent": 6, "examples": 0, "rejected_attempts": 0},
        {"source": "codex", "blocks": 78, "failed": 5, "with_intent": 78, "examples": 0, "rejected_attempts": 5},
        {"source": "otel", "blocks": 5, "failed": 1, "with_intent": 5, "examples": 0, "rejected_attempts": 1},
    ]
    command = learnerd_command("sources", "--state-dir", str(tmp_path / "state"))
    table = subprocess.run(command, env=cli_env(COLUMNS="250"), capture_output=True, text=True, timeout=120).stdout
    assert "4 tracked file(s)" in table
    assert re.search(re.escape(str(logs / "atuin" / "history.db")) + r" +│ atuin \(20\) +│ +20 │", table)
    assert "│ codex  │     78 │      5 │          78 │        0 │                 5 │" in table


def test_sources_without_a_store_says_so(tmp_path: Path):
    proc = run_cli("sources", "--state-dir", str(tmp_path / "none"), check=False)
    assert proc.returncode != 0 and "no learnerd database" in proc.stderr
