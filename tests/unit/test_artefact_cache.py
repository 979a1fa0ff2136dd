"""The tests' once-per-machine artefact cache (:mod:`tests.support.artefact_cache`): two processes asking for one
entry at once build it once; a failed or killed build leaves nothing that is used; the key follows the inputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.artefact_cache import COMPLETE, cached, content_key

# Builds the entry "slow" (a build of a second), counting its builds in a file: run twice at once.
BUILD_ONCE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.support.artefact_cache import cached

    def build(entry):
        with open(sys.argv[1], "a") as builds:
            builds.write("built\\n")
        time.sleep(1.0)
        (entry / "value").write_text("42")

    print((cached("slow", "ab" * 32, build) / "value").read_text())
    """
)


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LEARNERD_TEST_CACHE", str(root))
    return root


def test_two_processes_asking_at_once_build_the_entry_once(tmp_path: Path, cache_root: Path):
    builds = tmp_path / "builds.txt"
    env = {"LEARNERD_TEST_CACHE": str(cache_root), "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", BUILD_ONCE, str(builds)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["42", "42"]
    assert builds.read_text() == "built\n"
    assert (cache_root / ("slow-" + "ab" * 8) / COMPLETE).is_file()


def test_a_failed_build_leaves_nothing_and_the_next_call_builds_again(cache_root: Path):
    def fail(entry: Path) -> None:
        (entry / "half").write_text("x")
        raise RuntimeError("no network")

    with pytest.raises(RuntimeError, match="no network"):
        cached("flaky", "cd" * 32, fail)
    assert not (cache_root / ("flaky-" + "cd" * 8)).exists()
    entry = cached("flaky", "cd" * 32, lambda entry: (entry / "whole").write_text("y"))
    assert sorted(p.name for p in entry.iterdir()) == [COMPLETE, "whole"]


def test_an_entry_a_killed_build_left_is_built_again(cache_root: Path):
    half = cache_root / ("killed-" + "ef" * 8)
    half.mkdir(parents=True)
    (half / "half").write_text("x")  # no completion marker: the build was killed
    entry = cached("killed", "ef" * 32, lambda entry: (entry / "whole").write_text("y"))
    assert entry == half and sorted(p.name for p in entry.iterdir()) == [COMPLETE, "whole"]
    assert cached("killed", "ef" * 32, lambda entry: pytest.fail("built twice")) == entry


def test_the_key_follows_the_bytes_of_files_and_directories(tmp_path: Path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "a.py").write_text("x = 1\n")
    before = content_key("name", inputs, "1.0")
    assert content_key("name", inputs, "1.0") == before
    (inputs / "a.py").write_text("x = 2\n")
    assert content_key("name", inputs, "1.0") != before
    assert content_key("name", inputs / "a.py", "1.0") != content_key("name", inputs / "a.py", "1.1")
