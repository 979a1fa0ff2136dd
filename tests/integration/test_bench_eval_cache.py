"""``benchmarks/bench_eval_cache.py`` on the built-in tiny model: the next cycle's evaluation with the base's
side kept runs fewer forward passes than the same evaluation without it or with only the base's answers kept,
a second one fewer still or as few, with the same verdicts; a document too small to grow is refused with exit
2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, cli_env

SCRIPT = REPO_ROOT / "benchmarks" / "bench_eval_cache.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), "--base", "learnerd/tiny-llama", "--threads", "1", *args]
    return subprocess.run(command, capture_output=True, text=True, env=cli_env(), timeout=600, check=False)


@pytest.mark.slow
def test_the_next_cycle_with_the_base_kept_runs_fewer_forward_passes_with_the_same_verdicts() -> None:
    done = bench()
    assert done.returncode == 0, done.stderr[-2000:]
    line = re.compile(r"^\s*(?P<run>[a-z ]+): .* (?P<passes>\d+) forward passes", re.M)
    passes = {m["run"]: int(m["passes"]) for m in line.finditer(done.stdout)}
    assert set(passes) == {"previous cycle", "baseline", "answers kept", "next cycle", "again"}, done.stdout
    assert passes["again"] <= passes["next cycle"] < passes["answers kept"] <= passes["baseline"]
    assert re.search(r"^next cycle / baseline: \d+\.\d\d", done.stdout, re.M)
    assert "verdicts the same" in done.stdout


def test_a_document_with_too_few_pairs_to_grow_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "two.dlm"
    doc.write_text(
        "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
        "::instruction::\n### Q\nList the pods.\n\n### A\nkubectl get pods\n\n### Q\nDisk usage?\n\n### A\ndf -h\n"
    )
    done = bench("--doc", str(doc), "--grow", "2")
    assert done.returncode == 2 and "--grow must be 1..1" in done.stderr
