"""The cross-entropy of a causal LM computed at the loss-carrying positions only.

A causal LM's forward pass computes logits at every position: ``(rows, length, vocab)`` floats. Training needs them
only where a label follows — an answer's tokens, a few dozen of a row that may hold hundreds of prompt tokens
(retrieved examples, a system prompt, earlier turns). On a 49k-token vocabulary every position's logits cost
196 KB in float32, several times over (the float copy, the log-softmax, their gradients), which made most of a
training process's memory. :func:`loss_logits` runs the model with a forward pre-hook on its output embeddings
(``get_output_embeddings()``, the LM head) that hands the head only the hidden states at the loss positions, so the
logits are ``(positions, vocab)``; whatever the model does to its logits after the head (a soft cap, a scale) still
applies, element-wise. The loss is the same number as transformers' ``ForCausalLMLoss`` (the sum of the
cross-entropies at the label positions, in float32, over ``num_items_in_batch``), up to float summation order.
"""

from __future__ import annotations

from typing import Any

from learnerd.ml.rows import IGNORE_INDEX


def loss_mask(labels: Any) -> Any:
    """``(rows, length)`` bool: position ``p`` of a row carries loss when ``labels[row, p + 1]`` is a label (not
    ``IGNORE_INDEX``); the last position never does. ``labels``: ``(rows, length)`` int64."""
    import torch

    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    return mask


def loss_targets(labels: Any) -> Any:
    """The labels the positions of :func:`loss_mask` predict, in its row-major order: ``(positions,)`` int64."""
    return labels[:, 1:][labels[:, 1:] != IGNORE_INDEX]


def loss_logits(model: Any, input_ids: Any, attention_mask: Any, mask: Any) -> Any:
    """``model``'s logits at the positions ``mask`` selects (:func:`loss_mask`), in row-major order:
    ``(mask.sum(), vocab)``, with gradient when enabled. ``model``: a transformers causal LM or a peft model around
    one; ``input_ids`` / ``attention_mask``: ``(rows, length)`` int64."""

    def select(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0][mask], *args[1:])

    handle = model.get_output_embeddings().register_forward_pre_hook(select)
    try:
        return model(input_ids=input_ids, attention_mask=attention_mask).logits
    finally:
        handle.remove()


def cross_entropy_sum(logits: Any, targets: Any) -> Any:
    """The summed cross-entropy (nats, a 0-d float32 tensor) of ``logits`` ``(positions, vocab)`` against
    ``targets`` ``(positions,)``, computed in float32 as transformers' ``ForCausalLMLoss``."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.float(), targets, reduction="sum")
