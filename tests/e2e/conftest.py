"""Session fixtures of the end-to-end tests."""

from pathlib import Path

import pytest

from tests.support.pipeline import TldrRun, tldr_run
from tests.support.provenance import ThreeVersions, build_three_versions


@pytest.fixture(scope="session")
def three_versions(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> ThreeVersions:
    """Three adapter versions of ``learned.dlm`` trained from known log lines (:mod:`tests.support.provenance`)."""
    return build_three_versions(tmp_path_factory.mktemp("provenance"), models_dir)


@pytest.fixture(scope="session")
def tldr_once(tmp_path_factory: pytest.TempPathFactory, peer_data: Path) -> TldrRun:
    """One uninterrupted ``learnerd run --once`` over the ~1,000-block tldr subset
    (:func:`tests.support.pipeline.tldr_run`), shared by the session: the tldr pipeline test's first run and the
    crash-safety test's reference. Read it only (copy the state directory before running anything on it)."""
    return tldr_run(peer_data / "tldr", tmp_path_factory.mktemp("tldr-once"))
