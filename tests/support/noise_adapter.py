"""A LoRA adapter that changes what a model says without training: learnerd's default shape with seeded noise
in its B matrices (a fresh adapter's B is zero, so it would answer exactly as the base)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def noisy_lora(base_dir: Path, scale: float = 0.5) -> tuple[Any, Any]:
    """The model directory ``base_dir`` with a LoRA adapter of learnerd's default shape whose ``lora_B``
    entries are N(0, ``scale``²) float32 from a generator seeded with 7 (the same adapter on every run):
    ``(peft_model, tokenizer)``. ``scale`` 0 changes nothing; ``scale`` nan makes every logit NaN."""
    import torch

    from learnerd.ml.base_model import load_model_directory
    from learnerd.ml.lora import attach_lora
    from learnerd.store.dlm import TrainingConfig

    model, tokenizer = load_model_directory(base_dir)
    peft_model = attach_lora(model, TrainingConfig())
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return peft_model, tokenizer


def noise_adapter(base_dir: Path, out: Path, scale: float = 0.5) -> Path:
    """Save :func:`noisy_lora`'s adapter on ``base_dir`` to ``out``; returns ``out``."""
    peft_model, _ = noisy_lora(base_dir, scale)
    peft_model.save_pretrained(out)
    return out
