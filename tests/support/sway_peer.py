"""Both sides of a comparison with the released dlm-sway 0.1.0 on one base and one LoRA adapter (e.g.
:func:`benchmarks.bench_eval.make_adapter`'s): sway's HF backend over it and learnerd's differential
backend over it. Both load the base on CPU in float32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnerd.eval.backend import DifferentialBackend


def sway_backend(base_dir: Path, adapter_dir: Path) -> Any:
    """dlm-sway's ``HuggingFaceDifferentialBackend`` over ``adapter_dir`` on ``base_dir`` (CPU, float32)."""
    from dlm_sway.backends.hf import HuggingFaceDifferentialBackend
    from dlm_sway.core.model import ModelSpec

    return HuggingFaceDifferentialBackend(
        base_spec=ModelSpec(base=str(base_dir), dtype="fp32", device="cpu"), adapter_path=adapter_dir
    )


def learnerd_backend(base_dir: Path, adapter_dir: Path) -> DifferentialBackend:
    """learnerd's differential backend over ``adapter_dir`` on ``base_dir`` (CPU, float32)."""
    from peft import PeftModel

    from learnerd.ml.base_model import load_model_directory

    model, tokenizer = load_model_directory(base_dir)
    return DifferentialBackend(PeftModel.from_pretrained(model, adapter_dir).eval(), tokenizer)
