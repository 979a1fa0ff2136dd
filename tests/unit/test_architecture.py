"""The layers of docs/architecture.md hold, and import-linter's contracts catch an import that breaks them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e .[test])"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "learnerd", root / "learnerd", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_layers_hold() -> None:
    proc = lint_imports(REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout and " KEPT" in proc.stdout


@pytest.mark.parametrize(
    ("module", "forbidden", "contract"),
    [
        ("store/atomic.py", "from learnerd.daemon import app", "layers"),
        ("api/errors.py", "from learnerd.daemon import control", "layers"),
        ("client.py", "from learnerd.integrations import ipython", "layers"),
        ("runtime/debounce.py", "from learnerd import sections", "runtime is independent"),
        ("api/search.py", "from learnerd.reconcilers import probes", "api imports neither reconcilers nor daemon"),
        ("eval/suite.py", "from learnerd.training import cycle", "layers"),
        ("ml/rows.py", "from learnerd.training import lora", "layers"),
        ("training/recipes.py", "from learnerd.reconcilers import training", "layers"),
        ("store/atomic.py", "import torch", "nothing else imports torch"),
        ("analyzer/tail.py", "from peft import PeftModel", "nothing else imports torch"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path: Path, module: str, forbidden: str, contract: str) -> None:
    root = copy_of_the_package(tmp_path)
    target = root / "learnerd" / module
    target.write_text(target.read_text() + f"\n{forbidden}  # noqa: E402, F401\n")
    proc = lint_imports(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    flat = " ".join(proc.stdout.split())  # the report wraps long lines
    assert re.search(r"Contracts: \d+ kept, [1-9]\d* broken\.", flat), proc.stdout
    after_name = flat[flat.index(contract) :]
    verdict = re.search(r"\b(KEPT|BROKEN)\b", after_name)
    assert verdict is not None and verdict.group(1) == "BROKEN", f"contract {contract!r} must be the broken one"
    importer = "learnerd." + module.removesuffix(".py").replace("/", ".")
    assert importer in flat.split("BROKEN", 1)[1], "the report names the forbidden import"
