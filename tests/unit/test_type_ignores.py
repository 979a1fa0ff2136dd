"""Every ``# type: ignore`` in learnerd names its error codes and says why, on the same line
(docs/architecture.md#types).

mypy itself refuses an ignore without a code (``enable_error_code = ["ignore-without-code"]``) and an unused
one (``warn_unused_ignores``); the reason is this test's.
"""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

IGNORE = re.compile(r"#\s*type:\s*ignore")
EXPLAINED = re.compile(r"# type: ignore\[[a-z-]+(?:, [a-z-]+)*\]  # \S")


def unexplained(text: str) -> list[int]:
    """The numbers of the lines of ``text`` with a ``type: ignore`` that lacks its codes or its reason."""
    lines = enumerate(text.splitlines(), start=1)
    return [n for n, line in lines if IGNORE.search(line) and not EXPLAINED.search(line)]


def test_the_rule_refuses_a_bare_ignore_and_one_without_a_reason() -> None:
    text = (
        "a = f()  # type: ignore\n"
        "b = g()  # type: ignore[arg-type]\n"
        "c = h()  # type: ignore[misc]  # bases made at import\n"
    )
    assert unexplained(text) == [1, 2]


def test_every_ignore_in_learnerd_says_why() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for path in sorted((REPO_ROOT / "learnerd").rglob("*.py"))
        for n in unexplained(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
