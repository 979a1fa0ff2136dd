"""Every benchmark says what input it needs, and one that lacks it says so and exits 2 (a clone without the
peer data beside it used to die in a ZeroDivisionError after loading MiniLM)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, cli_env

BENCHMARKS = sorted((REPO_ROOT / "benchmarks").glob("*.py"))
TLDR_BENCHMARKS = [
    "bench_embedding_throughput.py",
    "bench_freshness.py",
    "bench_ingest.py",
    "bench_learning.py",
    "bench_search.py",
]


@pytest.mark.parametrize("script", [p for p in BENCHMARKS if p.name != "__init__.py"], ids=lambda p: p.name)
def test_every_benchmark_says_what_input_it_needs(script: Path) -> None:
    tree = ast.parse(script.read_text())
    names = {
        t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    imported = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert "Input:" in (ast.get_docstring(tree) or "") or {"INPUT", "TLDR_INPUT"} & (names | imported), script.name
    assert "epilog=" in script.read_text(), f"{script.name}: --help must show the input (epilog)"


@pytest.mark.slow
@pytest.mark.parametrize("script", TLDR_BENCHMARKS)
def test_a_tldr_benchmark_without_its_pages_exits_2_and_says_why(script: str, tmp_path: Path) -> None:
    empty = tmp_path / "no-tldr"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / script), "--tldr", str(empty)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"no tldr pages under {empty}" in done.stderr and "Traceback" not in done.stderr


def test_the_converter_without_pages_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "tldr_to_blocklog.py"), str(tmp_path), str(tmp_path / "out")],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no tldr pages under" in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_bench_ingest_at_a_tiny_size_gives_one_block_per_example_in_every_format(peer_data: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_ingest.py"), "--mb", "0.05"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:4]}
    assert set(rows) == {"blocklog", "claude-code", "codex"}
    assert int(rows["blocklog"][3]) == max(int(rows["claude-code"][3]), int(rows["codex"][3])) > 0
    assert "target claude-code MB/s" in done.stdout and "target codex MB/s" in done.stdout


def test_bench_ingest_without_the_assistant_samples_exits_2(peer_data: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_ingest.py"), "--samples", str(tmp_path)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and f"no claude-code/ and codex/ samples under {tmp_path}" in done.stderr
