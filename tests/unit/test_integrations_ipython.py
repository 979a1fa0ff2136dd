"""The IPython extension's reading of a cell: its leading comment lines are the intent, the rest the code."""

from __future__ import annotations

import pytest

from learnerd.integrations.ipython import split_intent


@pytest.mark.parametrize(
    ("cell", "intent", "code"),
    [
        (
            "# List the pods\n!kubectl get pods\n# not intent\nx = 1",
            "List the pods",
            "!kubectl get pods\n# not intent\nx = 1",
        ),
        ("\n## Pods\n#in dev\n\nx = 1\n", "# Pods\nin dev", "x = 1"),
        ("x = 1", "", "x = 1"),
        ("# only a comment", "only a comment", ""),
    ],
)
def test_the_ipython_cell_is_split_into_its_leading_comment_and_its_code(cell: str, intent: str, code: str) -> None:
    assert split_intent(cell) == (intent, code)
