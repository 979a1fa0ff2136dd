"""Bad input on the command line: an unknown registry key, a key whose model is not cached, a corrupt
GGUF file and a GPU this machine lacks are each refused by ``learnerd train`` (and ``generate``) with one
line naming the fix, exit status 1, and nothing written — no adapter, no converted model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import cli_env, learnerd_command
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document


def refused(tmp_path: Path, *args: str) -> str:
    """Run ``learnerd ARGS`` with an empty Hugging Face cache; assert exit 1 with one stderr line; return it."""
    empty_hub = tmp_path / "hf-hub"
    empty_hub.mkdir(exist_ok=True)
    proc = subprocess.run(
        learnerd_command(*args),
        env=cli_env(HF_HUB_CACHE=str(empty_hub), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("base_model", "needle"),
    [
        ("qwen2.5-05b", "did you mean 'qwen2.5-0.5b'"),
        ("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct is not in the Hugging Face cache {hub}; learnerd never"
         " downloads: run `hf download Qwen/Qwen2.5-0.5B-Instruct`"),
        ("broken.gguf", "cannot read GGUF file {root}/broken.gguf"),
    ],
)  # fmt: skip
def test_unusable_base_models_are_refused_and_nothing_is_written(tmp_path, base_model, needle):
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    doc = qa_document(tmp_path / "doc.dlm", QA_PAIRS[:2], base_model=base_model)
    state = tmp_path / "state"
    line = refused(tmp_path, "train", str(doc), "--state-dir", str(state))
    assert line.startswith("learnerd train: error:")
    assert needle.format(hub=tmp_path / "hf-hub", root=tmp_path) in line
    assert not (state / "adapters").exists() or not list((state / "adapters").rglob("v0*"))
    models = state / "models"
    assert not models.exists() or not list(models.iterdir())  # no converted model, no staging directory


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_missing_gpu_is_refused(tmp_path, models_dir):
    doc = qa_document(tmp_path / "doc.dlm", QA_PAIRS[:2])
    state = tmp_path / "state"
    state.mkdir(mode=0o700)  # as learnerd makes it (a looser one is tightened, with a warning)
    (state / "models").symlink_to(models_dir)
    for command in (["train", str(doc), "--device", "cuda"], ["generate", str(doc), "hi", "--device", "cuda:0"]):
        line = refused(tmp_path, *command, "--state-dir", str(state))
        assert "torch sees no CUDA GPU" in line and 'set device = "cpu" or "auto"' in line
    assert not (state / "adapters").exists() or not list((state / "adapters").rglob("v0*"))
