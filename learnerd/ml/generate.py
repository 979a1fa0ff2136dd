"""Greedy answers from a chat model: the decoding used to check what an adapter learned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from learnerd.ml.rows import ChatMessage, render_chat


@dataclass(frozen=True)
class Reply:
    """A greedy reply: ``text`` (special tokens removed) and ``token_ids``, the generated ids up to but
    not including the first EOS id (so ``len(token_ids)`` is the reply's length in tokens)."""

    text: str
    token_ids: tuple[int, ...]


def greedy_reply(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    system: str | None = None,
    max_new_tokens: int = 64,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    shots: Sequence[tuple[str, str]] = (),
) -> Reply:
    """The model's greedy reply to a single user turn, rendered through the chat template as the
    trainer renders chat rows; stops at the generation config's EOS ids or after ``max_new_tokens``.

    Args:
        model: a causal LM or a ``PeftModel`` (inside ``disable_adapter()`` it answers as the base).
        logits_processor: an optional ``transformers.LogitsProcessorList`` applied at every step.
        stopping_criteria: an optional ``transformers.StoppingCriteriaList`` (e.g. to stop on a signal).
        shots: ``(question, answer)`` pairs put before ``prompt`` as earlier user / assistant turns
            (few-shot examples, the way foyle's agent passes retrieved examples).

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    import torch

    messages = [ChatMessage("system", system)] if system else []
    for question, answer in shots:
        messages += [ChatMessage("user", question), ChatMessage("assistant", answer)]
    ids = render_chat(tokenizer, [*messages, ChatMessage("user", prompt)], add_generation_prompt=True)
    input_ids = torch.tensor([ids], device=model.device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_id,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
        )
    new = out[0, len(ids) :].tolist()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    end = next((i for i, t in enumerate(new) if t in eos_ids), len(new))
    return Reply(text=tokenizer.decode(new[:end], skip_special_tokens=True), token_ids=tuple(new[:end]))


def greedy_answer(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    system: str | None = None,
    max_new_tokens: int = 64,
    logits_processor: Any = None,
) -> str:
    """:func:`greedy_reply`'s text: the decoded new tokens, special tokens removed.

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    reply = greedy_reply(
        model, tokenizer, prompt, system=system, max_new_tokens=max_new_tokens, logits_processor=logits_processor
    )
    return reply.text
