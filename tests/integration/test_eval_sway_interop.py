"""learnerd's null calibration and z-scores against the released dlm-sway 0.1.0, on one tiny base and adapter.

Both load the same saved LoRA adapter (noise in its B matrices, so it moves the distributions) on the
built-in tiny model: sway through its own HF backend and its ``null_adapter`` probe, learnerd through its
differential backend. With ``calibration = "sway"`` (the default) learnerd's null statistics for
``delta_kl`` — and so its z-scores — are sway's; with ``"document"`` they are not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes.base import EvalOptions, ProbeContext, z_score
from learnerd.eval.probes.null_adapter import run as calibrate
from learnerd.ml.base_model import load_model_directory
from learnerd.ml.lora import attach_lora
from learnerd.store.dlm import TrainingConfig, parse_text

sway = pytest.importorskip(
    "dlm_sway.backends.hf", reason="dlm-sway 0.1.0 is not installed (pip install dlm-sway==0.1.0, a test extra)"
)
pytestmark = pytest.mark.usefixtures("one_torch_thread")
TOP_K = 1024
"""Above the tiny vocabulary (262): whole distributions, no tail. (With a tail the two differ by design:
sway spreads it over the union of both top-k, learnerd over the whole vocabulary; see ml/divergence.py.)"""
DOC = (
    "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
    "::instruction::\n### Q !probe\nWhat is the capital of France?\n\n### A\nParis\n"
)


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, _ = load_model_directory(tiny_model_dir)
    peft_model = attach_lora(model, TrainingConfig())
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    path = tmp_path_factory.mktemp("adapter")
    peft_model.save_pretrained(path)
    return path


def sway_null_stats(tiny_model_dir: Path, adapter_dir: Path) -> dict[str, float]:
    from dlm_sway.core.model import ModelSpec
    from dlm_sway.probes.base import RunContext
    from dlm_sway.probes.null_adapter import NullAdapterProbe, NullAdapterSpec

    backend = sway.HuggingFaceDifferentialBackend(
        base_spec=ModelSpec(base=str(tiny_model_dir), dtype="fp32", device="cpu"), adapter_path=adapter_dir
    )
    spec = NullAdapterSpec(name="null", kind="null_adapter", calibrate_kinds=["delta_kl"], cache=False)
    result = NullAdapterProbe().run(spec, RunContext(backend=backend, top_k=TOP_K))
    assert result.verdict.value == "pass", result.message
    return dict(result.evidence["null_stats"]["delta_kl"])


def learnerd_null_stats(tiny_model_dir: Path, adapter_dir: Path, calibration: str) -> dict[str, float]:
    from peft import PeftModel

    model, tokenizer = load_model_directory(tiny_model_dir)
    backend = DifferentialBackend(PeftModel.from_pretrained(model, adapter_dir).eval(), tokenizer)
    inputs = document_inputs(parse_text(DOC), tokenizer)
    ctx = ProbeContext(backend, inputs, EvalOptions(top_k=TOP_K, calibration=calibration))
    calibrate(ctx)
    return ctx.null_stats["delta_kl"]


def test_sway_calibration_gives_sways_null_stats_and_z_scores(tiny_model_dir, adapter_dir):
    theirs = sway_null_stats(tiny_model_dir, adapter_dir)
    ours = learnerd_null_stats(tiny_model_dir, adapter_dir, "sway")
    # sway keeps log-probabilities in float32, learnerd in float64: agreement to float32's precision
    assert ours["mean"] == pytest.approx(theirs["mean"], rel=1e-4)
    assert ours["std"] == pytest.approx(theirs["std"], rel=1e-3)
    assert ours["n"] == theirs["n"] == 3 and ours["degenerate"] == theirs["degenerate"] == 0.0
    raw = theirs["mean"] + 5 * theirs["std"]  # any raw value: the same z on both sides
    ctx = ProbeContext(None, None, null_stats={"delta_kl": ours})  # type: ignore[arg-type]
    assert z_score(ctx, "delta_kl", raw) == pytest.approx(5.0, rel=1e-3)


def test_document_calibration_is_not_sways(tiny_model_dir, adapter_dir):
    theirs = sway_null_stats(tiny_model_dir, adapter_dir)
    ours = learnerd_null_stats(tiny_model_dir, adapter_dir, "document")
    assert ours["mean"] != pytest.approx(theirs["mean"], rel=1e-2)
