"""The KL term to the base: w × KL(base ‖ adapted) of the next-token distributions at the answer tokens of the
general replay rows, a distillation term to the base in the style of LwF (Li & Hoiem, "Learning without
Forgetting", 2016). Where a replay row's greedy answer pins the argmax token, the term pins the whole
distribution. The base's distribution is the same model's inside peft's ``disable_adapter()``, without gradients;
reported losses stay the cross-entropy alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from learnerd.ml.rows import IGNORE_INDEX, EncodedRow
from learnerd.training.ingredients import spec
from learnerd.training.ingredients.replay import is_replay
from learnerd.training.loss import loss_logits, loss_mask


class Options(spec.Options):
    replay_kl_weight: float = Field(0.0, ge=0.0, le=100.0)
    """the weight w of a KL(base ‖ adapted) term on the general replay rows' answer tokens, divided by the same
    token count as the cross-entropy; one more forward pass without gradients per micro-batch holding replay rows"""


def replay_kl(
    peft_model: Any, batch: Sequence[EncodedRow], input_ids: Any, attention_mask: Any, labels: Any, logits: Any
) -> Any:
    """KL(base ‖ adapted) of the next-token distributions, in nats, summed over the loss-carrying tokens of the
    batch's general replay rows (a 0-d float tensor with gradient through ``logits``; 0 when the batch has
    none). ``input_ids`` / ``attention_mask`` / ``labels``: the batch as the step loop collates it,
    ``(rows, length)`` int64; ``logits``: the adapted model's at the batch's loss-carrying positions,
    ``(positions, vocab)`` (:class:`~learnerd.training.ingredients.spec.Batch`).

    The base's forward pass sees the replay rows alone, cut to the longest of them, and computes logits at their
    loss-carrying positions only: the other rows of the batch (document, multi-turn and retrieval rows, often
    longer) carry no KL term, and right padding changes no logit of a causal model at a real position, so the
    result is the whole batch's up to float rounding."""
    import torch
    import torch.nn.functional as F

    flags = [is_replay(row.section_id) for row in batch]
    if not any(flags):
        return logits.sum() * 0.0
    replay = torch.tensor(flags, device=labels.device)
    of_replay = replay[(labels[:, 1:] != IGNORE_INDEX).nonzero()[:, 0]]  # per position of ``logits``
    if not bool(of_replay.any()):
        return logits.sum() * 0.0
    width = max(len(row.input_ids) for row, flag in zip(batch, flags, strict=True) if flag)
    rows = labels[replay, :width]
    with torch.no_grad(), peft_model.disable_adapter():
        base_logits = loss_logits(
            peft_model, input_ids[replay, :width], attention_mask[replay, :width], loss_mask(rows)
        )
    log_adapted = F.log_softmax(logits[of_replay].float(), dim=-1)
    log_base = F.log_softmax(base_logits.float(), dim=-1)
    return F.kl_div(log_adapted, log_base, log_target=True, reduction="sum")


def loss(options: Options, batch: spec.Batch) -> Any:
    """``replay_kl_weight`` × :func:`replay_kl` of the batch; None when the weight is 0."""
    if not options.replay_kl_weight:
        return None
    kl = replay_kl(batch.model, batch.rows, batch.input_ids, batch.attention_mask, batch.labels, batch.logits)
    return options.replay_kl_weight * kl


INGREDIENT = spec.Ingredient("replay_kl", Options, loss=loss)
