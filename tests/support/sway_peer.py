"""Both sides of a comparison with the released dlm-sway 0.1.0 on one base and one LoRA adapter: a saved
adapter whose B matrices are seeded noise (it moves the distributions; a fresh adapter's B is zero), sway's
HF backend over it, and learnerd's differential backend over it. Both load the base on CPU in float32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnerd.eval.backend import DifferentialBackend


def noise_adapter(base_dir: Path, out: Path, scale: float = 0.5, seed: int = 7) -> Path:
    """A LoRA adapter of learnerd's default shape on ``base_dir`` whose ``lora_B`` entries are N(0, scale²)
    from a generator seeded with ``seed``, saved to ``out``."""
    import torch

    from learnerd.ml.base_model import load_model_directory
    from learnerd.ml.lora import attach_lora
    from learnerd.store.dlm import TrainingConfig

    model, _ = load_model_directory(base_dir)
    peft_model = attach_lora(model, TrainingConfig())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    peft_model.save_pretrained(out)
    return out


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
