"""Session fixtures of the end-to-end tests."""

from pathlib import Path

import pytest

from tests.support.provenance import ThreeVersions, build_three_versions


@pytest.fixture(scope="session")
def three_versions(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> ThreeVersions:
    """Three adapter versions of ``learned.dlm`` trained from known log lines (:mod:`tests.support.provenance`)."""
    return build_three_versions(tmp_path_factory.mktemp("provenance"), models_dir)
