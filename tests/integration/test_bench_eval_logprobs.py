"""``benchmarks/bench_eval_logprobs.py`` on the built-in tiny model: ``section_internalization`` in learnerd's
batches runs each section's question once per view, far fewer forward passes than one item per batch, with the
same per-section NLLs; a document of one pair is refused with exit 2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_eval_logprobs
from tests.conftest import REPO_ROOT
from tests.integration.test_bench_eval_cache import first_pairs

SCRIPT = REPO_ROOT / "benchmarks" / "bench_eval_logprobs.py"
PAIRS = 6
"""Q/A pairs of the measured document (six sections, each its own answer and the 5 others': 36 items per view)."""


def bench(capsys, *args: str) -> subprocess.CompletedProcess[str]:
    """The bench's ``main()`` in this process, as a completed process: exit status, stdout, stderr."""
    capsys.readouterr()
    code = bench_eval_logprobs.main(["--base", "learnerd/tiny-llama", "--threads", "1", *args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([str(SCRIPT), *args], code, out, err)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_targets_of_one_question_share_its_forward_pass(capsys, tmp_path: Path) -> None:
    done = bench(capsys, "--doc", str(first_pairs(tmp_path / "commands.dlm", PAIRS)), "--repeats", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{PAIRS} sections, {PAIRS * PAIRS} items per view" in done.stdout, done.stdout
    line = re.compile(r"^\s*(?P<run>[a-z ]+): .* (?P<passes>\d+) forward passes", re.M)
    passes = {m["run"]: int(m["passes"]) for m in line.finditer(done.stdout)}
    # one item per batch: a pass of its context and one of its target, for each item on each view
    assert passes["one item per batch"] == 2 * 2 * PAIRS * PAIRS, done.stdout
    assert passes["batched"] < passes["one item per batch"] / PAIRS, done.stdout
    worst = re.search(r"largest relative difference (\S+)", done.stdout)
    assert worst and float(worst[1]) < 1e-4, done.stdout


def test_a_document_of_one_pair_is_refused(capsys, tmp_path: Path) -> None:
    done = bench(capsys, "--doc", str(first_pairs(tmp_path / "commands.dlm", 1)))
    assert done.returncode == 2 and "the probe needs two" in done.stderr
