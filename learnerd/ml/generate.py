"""Greedy answers from a chat model: the decoding used to check what an adapter learned."""

from __future__ import annotations

from typing import Any

from learnerd.ml.rows import ChatMessage, render_chat


def greedy_answer(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    system: str | None = None,
    max_new_tokens: int = 64,
    logits_processor: Any = None,
) -> str:
    """The model's greedy reply to a single user turn, rendered through the chat template as the
    trainer renders chat rows; stops at the generation config's EOS ids or after ``max_new_tokens``.

    Args:
        model: a causal LM or a ``PeftModel`` (inside ``disable_adapter()`` it answers as the base).
        logits_processor: an optional ``transformers.LogitsProcessorList`` applied at every step.

    Returns:
        the decoded new tokens, special tokens removed.

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    import torch

    messages = [ChatMessage("system", system)] if system else []
    ids = render_chat(tokenizer, [*messages, ChatMessage("user", prompt)], add_generation_prompt=True)
    input_ids = torch.tensor([ids])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_id,
            logits_processor=logits_processor,
        )
    return tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
