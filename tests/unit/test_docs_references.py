"""The manual names only what exists: every relative link of README.md and docs/*.md resolves to a file (and a
heading, for a ``#anchor``), and every repository path (``learnerd/…/x.py``, ``tests/…``, ``benchmarks/…``) or
dotted name (``learnerd.a.b``) that the manual or a docstring names is there."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

MANUAL = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
SOURCES = tuple(sorted((REPO_ROOT / "learnerd").rglob("*.py"))) + tuple(sorted((REPO_ROOT / "benchmarks").glob("*.py")))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # images too: their files must exist
PATH = re.compile(
    r"(?<![\w/.-])((?:learnerd|tests|benchmarks|examples|contrib)/[\w/.-]*\.(?:py|dlm|toml|jsonl|service))\b"
)
DOTTED = re.compile(r"(?<![\w/.-])learnerd(?:\.[A-Za-z_]\w*){2,}")
FENCE = re.compile(r"^(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of ``path``'s headings (outside code blocks), a repeated one suffixed ``-1``, ``-2``… (GitHub's)."""
    seen: dict[str, int] = {}
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return frozenset(out)


def prose(path: Path) -> str:
    """``path``'s text without its fenced code blocks (links there are code, not links)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return "\n".join(lines)


def broken_links(page: Path) -> list[str]:
    out = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            out.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            out.append(f"{target}: no such heading in {path.name}")
    return out


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A `heading`, with punctuation\n\n[ok](#a-heading-with-punctuation) [x](#nope) [y](gone.md)\n")
    assert broken_links(page) == ["#nope: no such heading in page.md", "gone.md: no such file"]


def named(pattern: re.Pattern[str], files: tuple[Path, ...]) -> dict[str, list[str]]:
    """Each match of ``pattern`` in ``files``, with the places that name it."""
    out: dict[str, list[str]] = {}
    for file in files:
        text = file.read_text(encoding="utf-8")
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.setdefault(m.group(1) if pattern.groups else m.group(0), []).append(
                f"{file.relative_to(REPO_ROOT)}:{line}"
            )
    return out


def test_every_repository_path_named_exists() -> None:
    missing = {p: where for p, where in named(PATH, MANUAL + SOURCES).items() if not (REPO_ROOT / p).exists()}
    assert missing == {}


@cache
def top_level_names(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def resolves(dotted: str) -> bool:
    """``learnerd.a.b…`` names a module, or a top-level name of the longest module it starts with."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        base = REPO_ROOT.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[end:]
            return not rest or rest[0].startswith("__") or rest[0] in top_level_names(module)
    return False


def test_every_dotted_name_named_exists() -> None:
    missing = {name: where for name, where in named(DOTTED, MANUAL + SOURCES).items() if not resolves(name)}
    assert missing == {}
    assert resolves("learnerd.eval.probes.null_adapter") and not resolves("learnerd.eval.null_adapter")
