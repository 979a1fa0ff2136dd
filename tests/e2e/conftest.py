"""Session fixtures of the end-to-end tests."""

from pathlib import Path

import pytest

from tests.support.pipeline import TldrRun, tldr_run
from tests.support.provenance import ThreeVersions, cached_three_versions


@pytest.fixture(scope="session")
def three_versions() -> ThreeVersions:
    """Three adapter versions of ``learned.dlm`` trained from known log lines, once per machine
    (:mod:`tests.support.provenance`). Read it only."""
    return cached_three_versions()


@pytest.fixture(scope="session")
def tldr_once(peer_data: Path) -> TldrRun:
    """One uninterrupted ``learnerd run --once`` over the ~1,000-block tldr subset, once per machine
    (:func:`tests.support.pipeline.tldr_run`): the tldr pipeline test's first run. Read it only (copy the state
    directory before running anything on it)."""
    return tldr_run(peer_data / "tldr")
