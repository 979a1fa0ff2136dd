"""``benchmarks/bench_eval_cache.py`` on the built-in tiny model: the next cycle's evaluation with the base's
side kept runs fewer forward passes than the same evaluation without it or with only the base's answers kept,
a second one fewer still or as few, with the same verdicts; a document too small to grow is refused with exit
2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_eval_cache
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "bench_eval_cache.py"
PAIRS = 8
"""Q/A pairs of the document the test measures, the first of ``examples/commands.dlm``'s 20: with ``--grow 2``, six
sections read back and two computed in the next cycle, enough for every inequality to be strict where it is."""


def bench(capsys, *args: str) -> subprocess.CompletedProcess[str]:
    """The bench's ``main()`` in this process (torch already imported here), as a completed process: exit status,
    stdout, stderr."""
    capsys.readouterr()
    code = bench_eval_cache.main(["--base", "learnerd/tiny-llama", "--threads", "1", *args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([str(SCRIPT), *args], code, out, err)


def first_pairs(target: Path, n: int) -> Path:
    """``examples/commands.dlm`` cut after its ``n``-th Q/A pair (its frontmatter, prose and first section)."""
    text = (REPO_ROOT / "examples" / "commands.dlm").read_text(encoding="utf-8")
    cut = [m.start() for m in re.finditer(r"^### Q", text, re.M)]
    target.write_text(text[: cut[n]] if n < len(cut) else text, encoding="utf-8")
    return target


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_the_next_cycle_with_the_base_kept_runs_fewer_forward_passes_with_the_same_verdicts(capsys, tmp_path) -> None:
    done = bench(capsys, "--doc", str(first_pairs(tmp_path / "commands.dlm", PAIRS)), "--grow", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    line = re.compile(r"^\s*(?P<run>[a-z ]+): .* (?P<passes>\d+) forward passes", re.M)
    passes = {m["run"]: int(m["passes"]) for m in line.finditer(done.stdout)}
    assert set(passes) == {"previous cycle", "baseline", "answers kept", "next cycle", "again"}, done.stdout
    assert passes["again"] <= passes["next cycle"] < passes["answers kept"] <= passes["baseline"]
    assert re.search(r"^next cycle / baseline: \d+\.\d\d", done.stdout, re.M)
    assert "verdicts the same" in done.stdout


def test_a_document_with_too_few_pairs_to_grow_is_refused(capsys, tmp_path: Path) -> None:
    doc = tmp_path / "two.dlm"
    doc.write_text(
        "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
        "::instruction::\n### Q\nList the pods.\n\n### A\nkubectl get pods\n\n### Q\nDisk usage?\n\n### A\ndf -h\n"
    )
    done = bench(capsys, "--doc", str(doc), "--grow", "2")
    assert done.returncode == 2 and "--grow must be 1..1" in done.stderr
