"""Greedy answers from a chat model: the decoding used to check what an adapter learned, and context-aware decoding.

**Context-aware decoding** (:func:`context_guidance`). A request answered under quoted retrieved examples
(:func:`learnerd.ml.retrieved_examples.with_examples`) is decoded with the next-token scores

    (1 + α) · log p(y | examples, request) − α · log p(y | request)

(Shi et al., "Trusting Your Evidence: Hallucinate Less with Context-aware Decoding", NAACL 2024, eq. 2, the
retrieved examples as the context): what the examples add to the model's belief is amplified, what it believes
without them discounted, so a model that would answer a task logged seconds ago with a command it memorised, or with
prose, copies the quoted example's command instead. It is transformers' classifier-free guidance with the request
without its examples as the negative prompt (``guidance_scale`` = 1 + α; ``UnbatchedClassifierFreeGuidance-
LogitsProcessor`` computes ``γ · (s_c − s_u) + s_u`` on log-softmaxed scores), which costs one more forward pass per
token, over the shorter prompt, with its own key/value cache: the endpoint's sampled answers take it. Greedy answers
compute the same scores with the negative prompts as the second half of the batch's rows instead (:func:`guided_rows`):
one forward pass per token. The endpoint applies the decoding to the base's answers on the transformers backend
(``[serve] context_alpha``: before a document's first version, and to a task logged since its version's cycle), the
evaluation's dialogue probe to its quoted turns the base answers (the gate judges what is served), and
``benchmarks/bench_learning.py`` to the base's quoted prompts. An adapter trained under retrieved examples (RAFT rows)
answers without it: it does not copy a fresh example under it either, and it lost a dialogue answer of 16.

Such an answer (the base's, under quoted examples) also ends with the closing fence of its first fenced code block,
on the endpoint and here alike (:func:`learnerd.store.suggestions.first_block_end`): the command is what is taken
from it, and what a small base writes after it costs seconds, twice the forward passes under the decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from learnerd.ml.rows import ChatMessage, padding_id, render_chat


@dataclass(frozen=True)
class Reply:
    """A greedy reply: ``text`` (special tokens removed) and ``token_ids``, the generated ids up to but
    not including the first EOS id (so ``len(token_ids)`` is the reply's length in tokens); ``ended``: the model
    ended it with an EOS id (not the token budget, nor the end of its first code block)."""

    text: str
    token_ids: tuple[int, ...]
    ended: bool = False


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device: Any = "cpu") -> tuple[Any, Any]:
    """``(input_ids, attention_mask)`` of ``prompts`` padded on the left to the longest, int64 tensors of
    shape ``(len(prompts), longest)`` on ``device`` — the layout HF ``generate`` takes for a batch (it derives
    the position ids from the mask)."""
    import torch

    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return input_ids, mask


def context_guidance(
    alpha: float, negatives: Sequence[Sequence[int]], pad_id: int, device: Any = "cpu"
) -> dict[str, Any]:
    """The keyword arguments of HF ``generate`` that decode a batch with context-aware decoding at ``alpha`` (α; the
    module docstring): ``negatives`` are the negative prompts' token ids, one per row of the batch in its order (each
    prompt without its retrieved examples), left-padded as the batch is (:func:`left_padded`); empty when ``alpha``
    is 0 or below. RoPE attends by relative position, so a negative row's left padding (whose positions the second
    forward pass counts from 0, padding included) changes its scores only by summation order.

    Raises:
        ValueError: ``alpha`` is above 0 and ``negatives`` is empty or holds an empty prompt.
    """
    if alpha <= 0:
        return {}
    if not negatives or any(not n for n in negatives):
        raise ValueError("context-aware decoding needs one non-empty negative prompt per row")
    ids, mask = left_padded(negatives, pad_id, device)
    return {"guidance_scale": 1.0 + alpha, "negative_prompt_ids": ids, "negative_prompt_attention_mask": mask}


def guided_rows(
    alpha: float,
    prompts: Sequence[Sequence[int]],
    negatives: Sequence[Sequence[int]],
    pad_id: int,
    device: Any = "cpu",
    then: Any = None,
) -> dict[str, Any]:
    """The keyword arguments of HF ``generate`` that decode ``prompts`` (n token-id lists) **greedily** with
    context-aware decoding at ``alpha`` (> 0) in one forward pass per token: ``negatives`` (each prompt without its
    retrieved examples, in the same order) are the batch's rows n to 2n − 1, all 2n left-padded to one width
    (:func:`left_padded`), and :class:`GuidedRows` (with ``then``, the logits processors that follow the guidance, or
    None) decodes them. Row n + i generates the same tokens as row i: read the first n. The scores are
    :func:`context_guidance`'s, up to floating-point summation order; the negative prompts ride in the prompts' forward
    pass instead of a second one per token (its cost against transformers' unbatched guidance:
    ``benchmarks/bench_context_aware.py``, docs/benchmarks.md). Sampling cannot use it: a negative row could not
    follow a token drawn for its prompt.

    Raises:
        ValueError: ``alpha`` is not above 0, no prompt is given, ``negatives`` are not one per prompt, or one is
            empty.
    """
    if alpha <= 0 or not prompts or len(negatives) != len(prompts) or any(not n for n in negatives):
        raise ValueError(
            f"guided rows need alpha > 0 and one non-empty negative prompt per prompt, got alpha {alpha}, "
            f"{len(prompts)} prompts and {len(negatives)} negatives"
        )
    from transformers import LogitsProcessorList

    ids, mask = left_padded([*prompts, *negatives], pad_id, device)
    processors = LogitsProcessorList([GuidedRows(alpha, then)])
    return {"input_ids": ids, "attention_mask": mask, "logits_processor": processors}


def greedy_inputs(
    prompts: Sequence[Sequence[int]],
    negatives: Sequence[Sequence[int]] | None,
    alpha: float,
    pad_id: int,
    device: Any = "cpu",
    then: Any = None,
) -> dict[str, Any]:
    """The keyword arguments of HF ``generate`` for one greedy batch of ``prompts``: :func:`guided_rows` when
    ``negatives`` (one per prompt) are given and ``alpha`` is above 0, else the prompts left-padded
    (:func:`left_padded`) with ``then`` as the logits processors. Read the generated rows up to ``len(prompts)``.

    Raises:
        ValueError: as :func:`guided_rows`.
    """
    if negatives and alpha > 0:
        return guided_rows(alpha, prompts, negatives, pad_id, device, then)
    ids, mask = left_padded(prompts, pad_id, device)
    return {"input_ids": ids, "attention_mask": mask, "logits_processor": then}


class GuidedRows:
    """A transformers logits processor for a batch of 2n rows decoded greedily, n prompts then their n negative
    prompts (:func:`guided_rows`): row i's scores become (1 + α) · log_softmax(s_i) − α · log_softmax(s_{n+i}), the
    guided scores of transformers' ``UnbatchedClassifierFreeGuidanceLogitsProcessor`` (``guidance_scale`` = 1 + α),
    then ``then`` (a logits processor list, or None) is applied to the n guided rows, as it follows the guidance there;
    row n + i gets 0 at row i's argmax and −inf elsewhere, so it takes the same token and stays its negative prompt
    followed by the answer so far. ``scores``: float logits of shape ``(2n, vocabulary)``."""

    def __init__(self, alpha: float, then: Any = None) -> None:
        self.alpha = alpha
        self.then = then

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        n = scores.shape[0] // 2
        logprobs = scores.float().log_softmax(-1)
        guided = (1 + self.alpha) * logprobs[:n] - self.alpha * logprobs[n:]
        if self.then is not None:
            guided = self.then(input_ids[:n], guided)
        out = torch.full_like(scores, float("-inf"))
        out[:n] = guided
        out[torch.arange(n, 2 * n), guided.argmax(-1)] = 0.0
        return out


def generation_eos_ids(model: Any) -> set[int]:
    """The end-of-sequence ids of ``model.generation_config`` (an int or a list there; empty when unset)."""
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos]) - {None}


def chat_turns(prompt: str, *, system: str | None = None) -> list[ChatMessage]:
    """The messages of one question: ``system`` first when given, then ``prompt`` as the user turn."""
    return [*([ChatMessage("system", system)] if system else []), ChatMessage("user", prompt)]


def greedy_reply(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    system: str | None = None,
    max_new_tokens: int = 64,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
) -> Reply:
    """The model's greedy reply to a single user turn (:func:`chat_turns`), rendered through the chat
    template as the trainer renders chat rows; stops at the generation config's EOS ids or after
    ``max_new_tokens``. A batch of one of :func:`greedy_replies`.

    Args:
        model: a causal LM or a ``PeftModel`` (inside ``disable_adapter()`` it answers as the base).
        logits_processor: an optional ``transformers.LogitsProcessorList`` applied at every step.
        stopping_criteria: an optional ``transformers.StoppingCriteriaList`` (e.g. to stop on a signal).

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    conversation = chat_turns(prompt, system=system)
    return greedy_replies(
        model,
        tokenizer,
        [conversation],
        max_new_tokens=max_new_tokens,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
    )[0]


def greedy_replies(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[Sequence[ChatMessage]],
    *,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    on_batch: Callable[[int], None] | None = None,
    negatives: Sequence[Sequence[ChatMessage] | None] | None = None,
    context_alpha: float = 0.0,
) -> list[Reply]:
    """The greedy reply to each of ``conversations`` (lists of :class:`ChatMessage`, the last a user
    turn), in order, generated in left-padded batches of at most ``batch_size`` conversations of similar
    length (HF ``generate`` derives the position ids from the attention mask). In float32, batching
    changes the logits only by summation order (≈ 1e-6 relative), so a batched greedy answer differs from
    the one-at-a-time answer only where two tokens tie that closely. ``on_batch(replies_done)`` is called after
    each batch.

    A conversation whose ``negatives`` entry is not None (the conversation without its retrieved examples: the base
    answers under quoted examples) is answered as the endpoint answers it, in batches of its own: with
    context-aware decoding against that entry when ``context_alpha`` is above 0 (:func:`guided_rows`: each batch's
    negative prompts as its second half of rows, ``logits_processor`` applied after the guidance), and
    ending with the closing fence of its first fenced code block, or after as many tokens as it may take to open one
    (:func:`cut_at_block`); the others as without.

    Raises:
        RowEncodingError: the tokenizer has no chat template.
        ValueError: ``batch_size`` < 1, or ``negatives`` not one per conversation.
    """
    import torch

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prompts = [render_chat(tokenizer, list(c), add_generation_prompt=True) for c in conversations]
    eos_ids = generation_eos_ids(model)
    pad_id = padding_id(tokenizer, eos_ids)
    if negatives is not None and len(negatives) != len(prompts):
        raise ValueError(f"{len(negatives)} negative prompts for {len(prompts)} conversations")
    unquoted = [
        render_chat(tokenizer, list(n), add_generation_prompt=True) if n is not None else None
        for n in (negatives if negatives is not None else [None] * len(prompts))
    ]
    order = sorted(range(len(prompts)), key=lambda i: (unquoted[i] is not None, len(prompts[i])))
    batches = [
        [i for i in order[start : start + batch_size] if (unquoted[i] is not None) == quoted]
        for start in range(0, len(order), batch_size)
        for quoted in (False, True)
    ]
    replies: dict[int, Reply] = {}
    for batch in (b for b in batches if b):
        negative = [n for n in (unquoted[i] for i in batch) if n is not None]
        asked = [prompts[i] for i in batch]
        decoding = greedy_inputs(asked, negative, context_alpha, pad_id, model.device, logits_processor)
        width = decoding["input_ids"].shape[1]
        stops = stopping_criteria
        if negative:
            stops = [*(stopping_criteria or []), BlockEnds(tokenizer, width, frozenset(eos_ids))]
        with torch.no_grad():
            out = model.generate(
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad_id,
                stopping_criteria=stops,
                **decoding,
            )
        for row, i in enumerate(batch):
            generated = out[row, width:].tolist()
            new = until_eos(generated, eos_ids)
            end, text = (
                cut_at_block(tokenizer, new)
                if negative
                else (len(new), tokenizer.decode(new, skip_special_tokens=True))
            )
            ended = end == len(new) and ended_with_eos(text, end, len(generated), at_block=bool(negative))
            replies[i] = Reply(text=text, token_ids=tuple(new[:end]), ended=ended)
        if on_batch is not None:
            on_batch(len(replies))
    return [replies[i] for i in range(len(prompts))]


def cut_at_block(tokenizer: Any, token_ids: Sequence[int]) -> tuple[int, str]:
    """How many of ``token_ids`` (an answer's generated ids, up to its EOS) an answer that ends with its first fenced
    code block keeps, and its text: the ids up to the one that completes the block's closing line, the text cut
    after the closing fence; the first :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` ids and their text when
    no block opened within them (:func:`learnerd.store.suggestions.answer_end`, as the endpoint's text tracker cuts
    it); all of them and their whole text when neither happens."""
    from learnerd.store.suggestions import answer_end

    for n in range(1, len(token_ids) + 1):
        text = tokenizer.decode(token_ids[:n], skip_special_tokens=True)
        end = answer_end(text, n)
        if end is not None:
            return n, text[:end]
    return len(token_ids), tokenizer.decode(token_ids, skip_special_tokens=True)


@dataclass(frozen=True)
class BlockEnds:
    """A stopping criterion of HF ``generate`` (one bool per row of ``input_ids``, shape ``(batch, width + steps)``):
    a row is done once its new ids (after the prompt's ``width``, up to an id of ``eos_ids``) close their first fenced
    code block, or number :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` without opening one
    (:func:`cut_at_block`)."""

    tokenizer: Any
    width: int
    eos_ids: frozenset[int]

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        from learnerd.store.suggestions import answer_end

        new = [until_eos(row[self.width :], self.eos_ids) for row in input_ids.tolist()]
        ended = [answer_end(self.tokenizer.decode(ids, skip_special_tokens=True), len(ids)) for ids in new]
        return torch.tensor([e is not None for e in ended], dtype=torch.bool, device=input_ids.device)


def ended_with_eos(text: str, tokens: int, room: int, *, at_block: bool) -> bool:
    """Whether a greedy answer ended with an EOS id: ``tokens`` generated ids (up to its first EOS id) that decode to
    ``text``, of ``room`` it had (its token budget, or its batch's generated width, padding included). It did when it
    stopped short of ``room``, unless it ends with its first fenced code block (``at_block``: the base's answers under
    quoted examples, :func:`cut_at_block`) and stopped where :func:`learnerd.store.suggestions.answer_end` ends it:
    after the block, or at :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` ids without one (a batch pads such
    a row after it, and SmolLM2 pads with its EOS id). The endpoint reads the same from its stream."""
    from learnerd.store.suggestions import answer_end

    return tokens < room and not (at_block and answer_end(text, tokens) is not None)


def until_eos(token_ids: Sequence[int], eos_ids: Collection[int]) -> list[int]:
    """``token_ids`` up to, not including, the first id of ``eos_ids``."""
    return list(token_ids[: next((j for j, t in enumerate(token_ids) if t in eos_ids), len(token_ids))])


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
