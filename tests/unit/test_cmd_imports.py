"""``learnerd --help`` stays fast: it imports none of the model libraries (torch, transformers, peft)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "transformers", "peft", "sentence_transformers")

PROBE = f"""
import sys
from learnerd.cmd.main import main
try:
    main(["--help"])
except SystemExit:
    pass
print("loaded:" + ",".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def test_help_imports_no_model_library() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert "usage: learnerd" in proc.stdout, proc.stdout
    loaded = proc.stdout.rsplit("loaded:", 1)[1].strip()
    assert loaded == "", f"`learnerd --help` imported {loaded}"
