"""Decode-time steering: vocabulary clusters, a logits processor and the delta-evolution loop."""
