"""The manual's code blocks, as tests run them: what users copy is what runs."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

INTEGRATIONS = REPO_ROOT / "docs" / "integrations.md"


def doc_block(name: str) -> str:
    """The fenced block after ``<!-- test: name -->`` in docs/integrations.md."""
    match = re.search(rf"<!-- test: {name} -->\n```\w*\n(.*?)\n```", INTEGRATIONS.read_text(), re.S)
    assert match is not None, f"no block marked {name!r} in {INTEGRATIONS}"
    return match.group(1)
