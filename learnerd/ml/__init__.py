"""Model-facing code: embedders, base-model loading, LoRA training, divergences."""
