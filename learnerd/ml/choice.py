"""Choosing a quoted example's command over the command a model wrote: the served model's own likelihood decides.

A request answered under retrieved examples (:func:`learnerd.ml.retrieved_examples.with_examples`) is often answered
with a near copy of the quoted command rather than the command itself: a trained adapter asked in other words writes
what it memorised (``find . -iname "MyCProgam.c"`` under the quoted ``find -iname "MyCProgram.c"``), runs on past it
(``find /usr -newermt "Feb 1" -newermt "Feb 1" …``) or answers in prose; a base answering a task logged seconds ago
writes ``sudo mkdir -m 777 dirname`` under ``mkdir -m 777 dirname``. The model is then asked how likely it finds each
quoted command in its answer's place (:func:`choose_command`): the answer with its command replaced by the quoted one
(the body of its first fenced code block, else the whole answer: :func:`learnerd.store.suggestions.command_of`), scored
from the command on — the command, what followed it, and the end of the reply. When the likeliest quoted command's mean
token log-probability is within ``margin`` nats of the model's own command's, the answer carries the quoted command.

It is the likelihood ranking of candidate answers (as a multiple-choice evaluation scores its options, length-
normalised; Brown et al. 2020, section 2.4) with the model's own greedy answer among the candidates and a margin in its
favour: a request whose arguments differ from every quoted example's keeps the command the model wrote for it, as
the quoted commands' differing argument tokens are unlikely under it. Under context-aware decoding the tokens are
scored by the guided distribution the answer was decoded with (:func:`learnerd.ml.generate.context_guidance`).

Screened on dev documents only (docs/benchmarks.md, "Choosing a quoted command"): margins from 0.3 to 2 nats answered
the same prompts; the endpoint's default (``[serve] choice_margin``, 0.5) lies inside that range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt

from learnerd.ml.generate import Reply, generation_eos_ids
from learnerd.ml.rows import ChatMessage, render_chat
from learnerd.store.suggestions import normalize_command


@dataclass(frozen=True)
class Choice:
    """What :func:`choose_command` decided: ``text``, the answer (the model's own, or its command replaced by the
    quoted one); ``example``, the index of the quoted command it carries (None: the model's own); ``own_nats`` and
    ``best_nats``, the mean token log-probabilities (nats, ≤ 0) of the model's command and of the likeliest quoted
    one (None when nothing was scored)."""

    text: str
    example: int | None = None
    own_nats: float | None = None
    best_nats: float | None = None


def command_span(answer: str) -> tuple[int, int]:
    """``(start, end)``, the character span of the command ``answer`` suggests: the body of its first fenced code block
    (CommonMark 0.31, as :func:`learnerd.store.suggestions.command_of` reads it), surrounding whitespace excluded;
    else the whole answer without its surrounding whitespace. ``start == end`` for an empty body."""
    tokens = MarkdownIt("commonmark").parse(answer)
    fence = next((t for t in tokens if t.type == "fence"), None)
    if fence is None or fence.map is None:
        start = len(answer) - len(answer.lstrip())
        return start, max(start, len(answer.rstrip()))
    lines = answer.split("\n")
    body_start = sum(len(line) + 1 for line in lines[: fence.map[0] + 1])
    body_start = min(body_start, len(answer))
    content = fence.content.strip()
    found = answer.find(content, body_start) if content else -1
    if found < 0:
        return body_start, body_start
    return found, found + len(content)


def choose_command(
    model: Any,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    answer: str,
    commands: Sequence[str],
    margin: float,
    *,
    ended: bool,
    eos_id: int | None,
    negative_ids: Sequence[int] | None = None,
    alpha: float = 0.0,
    prefilled: tuple[Any, Sequence[int]] | None = None,
) -> Choice:
    """The answer to give for ``answer``, the greedy reply of ``model`` (a causal LM, or a peft model in the state that
    answered) to ``prompt_ids`` (the rendered conversation with its generation prompt, int token ids), under the
    quoted examples whose commands are ``commands`` (nearest first): the module docstring's rule at ``margin`` nats per
    token. ``ended``: the reply ended with ``eos_id``, which is then scored after each candidate too. ``negative_ids``
    and ``alpha``: the prompt without its examples and the context-aware decoding α the reply was decoded with (the
    candidates are scored by the same guided distribution). One forward pass over the prompt (two under guidance), then
    one over the ``len(commands) + 1`` candidates after it. ``prefilled``: ``(cache, ids)``, a key/value cache of
    ``model`` in this state (a transformers ``Cache``) over the token ids ``ids`` — generation's own, over the prompt
    and the reply's tokens — which replaces the forward pass over the prompt (and the answer's text before its command)
    when ``ids`` begin with them; it is cropped and repeated in place, so it is spent afterwards.

    An answer whose command is one of ``commands`` (whitespace collapsed, :func:`normalize_command`) is kept as it is,
    unscored, as is one without a command or with nothing but empty ``commands``.

    Raises:
        ValueError: ``margin`` is negative, or ``alpha`` is above 0 without ``negative_ids``.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0 nats, got {margin}")
    if alpha > 0 and not negative_ids:
        raise ValueError("context-aware scoring needs the prompt without its examples")
    start, end = command_span(answer)
    own = answer[start:end]
    if not own.strip() or normalize_command(own) in {normalize_command(c) for c in commands}:
        return Choice(answer)
    others = [i for i, c in enumerate(commands) if c.strip()]
    if not others:
        return Choice(answer)
    prefix = list(tokenizer(answer[:start], add_special_tokens=False)["input_ids"]) if start else []
    tail = [eos_id] if ended and eos_id is not None else []
    rows = [own + answer[end:], *(commands[i].strip() + answer[end:] for i in others)]
    bodies = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) + tail for text in rows]
    negative = [*negative_ids, *prefix] if alpha > 0 and negative_ids else None
    scores = _mean_logprobs(model, [*prompt_ids, *prefix], bodies, alpha, negative, prefilled)
    best = max(range(1, len(rows)), key=lambda r: scores[r])
    if scores[best] < scores[0] - margin:
        return Choice(answer, None, scores[0], scores[best])
    chosen = others[best - 1]
    return Choice(answer[:start] + commands[chosen].strip() + answer[end:], chosen, scores[0], scores[best])


def _mean_logprobs(
    model: Any,
    prompt: Sequence[int],
    bodies: Sequence[Sequence[int]],
    alpha: float,
    negative: Sequence[int] | None,
    prefilled: tuple[Any, Sequence[int]] | None = None,
) -> list[float]:
    """Mean log-probability (nats per token) of each of ``bodies`` after ``prompt`` under ``model``; with ``negative``,
    under context-aware decoding's guided distribution log_softmax((1 + α) · log p(y | prompt) − α · log p(y |
    negative)). The prompt, all but its last token, is run once (or taken from ``prefilled``, :func:`_reused`) and its
    key/value cache repeated for the bodies, each right-padded after the prompt's last token in one batch (a body's
    padding is masked out and not scored)."""
    import torch

    def logprobs(context: Sequence[int], cache: Any) -> Any:  # (bodies, longest body, vocabulary): body tokens' scores
        rows, width, past = len(bodies), 1 + max(len(b) for b in bodies), len(context) - 1
        with torch.no_grad():
            if cache is None and past:
                head = torch.tensor([list(context[:-1])], device=model.device)
                cache = model(input_ids=head, use_cache=True, logits_to_keep=1).cache
            if cache is not None:
                cache.batch_repeat_interleave(rows)
            ids = torch.zeros((rows, width), dtype=torch.long, device=model.device)
            mask = torch.zeros((rows, past + width), dtype=torch.long, device=model.device)
            mask[:, :past] = 1
            for r, body in enumerate(bodies):
                ids[r, : 1 + len(body)] = torch.tensor([context[-1], *body])
                mask[r, past : past + 1 + len(body)] = 1
            logits = model(input_ids=ids, attention_mask=mask, cache=cache).logits
        return logits[:, :-1].float().log_softmax(-1)  # position j predicts body token j

    scored = logprobs(prompt, _reused(prefilled, prompt[:-1]))
    if negative is not None and alpha > 0:
        scored = ((1 + alpha) * scored - alpha * logprobs(negative, None)).log_softmax(-1)
    means = []
    for r, body in enumerate(bodies):
        picked = scored[r, torch.arange(len(body)), torch.tensor(body)]
        means.append(float(picked.mean()))
    return means


def _reused(prefilled: tuple[Any, Sequence[int]] | None, ids: Sequence[int]) -> Any:
    """``prefilled``'s cache cropped to ``ids`` (non-empty) when its token ids begin with them and it holds them all;
    None otherwise (and for a cache that cannot be cropped, e.g. a sliding window's)."""
    if prefilled is None or not ids:
        return None
    cache, covered = prefilled
    held = cache.get_seq_length()
    if held < len(ids) or not getattr(cache, "is_croppable", True) or list(covered[: len(ids)]) != list(ids):
        return None
    cache.crop(len(ids) - held)  # transformers 5: a negative count of tokens to remove
    return cache


def chosen_replies(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[Sequence[ChatMessage]],
    replies: Sequence[Reply],
    commands: Sequence[Sequence[str]],
    margin: float,
    *,
    negatives: Sequence[Sequence[ChatMessage] | None] | None = None,
    alpha: float = 0.0,
) -> list[Choice]:
    """:func:`choose_command` for each of ``replies`` (:func:`learnerd.ml.generate.greedy_replies` of
    ``conversations``, with the same ``negatives`` and ``alpha``) under its quoted examples' ``commands`` (one list per
    conversation; an empty list keeps the reply).

    Raises:
        ValueError: the lists differ in length, or as :func:`choose_command`.
    """
    if not len(conversations) == len(replies) == len(commands):
        raise ValueError(f"{len(conversations)} conversations, {len(replies)} replies, {len(commands)} command lists")
    negatives = negatives if negatives is not None else [None] * len(replies)
    eos = min(generation_eos_ids(model), default=None)
    out = []
    for conversation, reply, quoted, negative in zip(conversations, replies, commands, negatives, strict=True):
        if not quoted:
            out.append(Choice(reply.text))
            continue
        out.append(
            choose_command(
                model,
                tokenizer,
                render_chat(tokenizer, list(conversation), add_generation_prompt=True),
                reply.text,
                quoted,
                margin,
                ended=reply.ended,
                eos_id=eos,
                negative_ids=render_chat(tokenizer, list(negative), add_generation_prompt=True) if negative else None,
                alpha=alpha if negative else 0.0,
            )
        )
    return out
