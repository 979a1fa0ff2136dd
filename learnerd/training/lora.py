"""The LoRA training loop (peft on a transformers causal LM), in-process.

:func:`train_lora` wraps a base model in a fresh LoRA adapter — or resumes a saved one — and trains it
on encoded rows with AdamW, a warm-up + ``lr_scheduler`` schedule from ``transformers.get_scheduler``,
gradient clipping at 1.0 and gradient accumulation. The loss of an optimizer step is the mean
cross-entropy per loss-carrying token over all its micro-batches (``num_items_in_batch``, as the
transformers Trainer computes it), in nats per token. With ``training.replay_kl_weight`` w > 0 the
objective adds w × the KL divergence KL(base ‖ adapted) of the next-token distributions at the answer
tokens of the general replay rows (:mod:`learnerd.training.ingredients.replay`), summed over those tokens and divided
by the same token count as the cross-entropy (the base's distribution is the same model's inside peft's
``disable_adapter()``, computed without gradients) — a distillation term to the base in the style of
LwF (Li & Hoiem, "Learning without Forgetting", 2016). Reported losses stay the cross-entropy alone.

Deterministic for a fixed ``seed`` and a fixed number of torch threads: the adapter's initial weights,
the dropout masks and the row order all come from generators seeded with it. Rows are shuffled once
per epoch; ``max_steps`` cycles through as many epochs as it needs. A ``max_steps`` budget that ends
within the first epoch trains a seeded sample of the rows it reaches (:func:`budget_rows`), and only those
are tokenised and scored: a large document costs a small-budget cycle its budget, not its size.

An incremental cycle rehearses its document's unchanged rows on a budget (``rehearsal`` and
``rehearsal_per_epoch``): each epoch holds every row of ``rows`` and the next ``rehearsal_per_epoch`` of
the rehearsal rows, taken in turn from seeded permutations of them, so the budget's passes are spread over
all of them (each seen about ``epochs × per_epoch / len(rehearsal)`` times) rather than spent on a few.

Runs wherever it is called; :mod:`learnerd.training.worker` calls it in a child process so the
daemon's event loop never waits on it.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.loader import load_adapter, loading
from learnerd.ml.rows import IGNORE_INDEX, EncodedRow, RowEncodingError, TrainingRow, encode_rows
from learnerd.store.dlm import TrainingConfig
from learnerd.training.checkpoint import TrainingCheckpoint
from learnerd.training.config import check_trainable
from learnerd.training.ingredients.replay import is_replay

log = structlog.get_logger(__name__)

MAX_GRAD_NORM = 1.0


@dataclass(frozen=True)
class ProgressEvent:
    """Reported after every optimizer step.

    ``loss`` is that step's mean loss (nats/token); ``tokens`` the input tokens (padding excluded)
    trained on so far in this run; ``elapsed_s`` wall seconds since the first step started. ``restored``: a step
    an earlier run trained, reported again from the checkpoint this one went on from (all of them first, at once:
    a pace or an ETA counts only the others).
    """

    step: int
    total_steps: int
    loss: float
    learning_rate: float
    tokens: int
    elapsed_s: float
    restored: bool = False


@dataclass(frozen=True)
class TrainingResult:
    """The outcome of one :func:`train_lora` run.

    ``start_loss`` and ``final_loss`` are the mean loss per loss-carrying token (nats) over all the
    rows trained on, measured without dropout before the first step and after the last one.
    ``tokens_trained`` counts input tokens (padding excluded) over every step, ``tokens_computed`` the
    positions the forward passes computed (padding included: micro-batch rows × its longest row, summed over
    every step; ``group_by_length`` lowers it); ``train_s`` is the wall time of the steps alone; ``rows`` the
    rows an epoch trains (rehearsed ones included). ``dropped`` lists section ids of rows left without a loss
    token by truncation to ``sequence_len``. ``vocab_size`` is the base's vocabulary size (tokens; 0: unknown),
    for the uniform-guess loss ln(vocab_size) of :func:`learnerd.training.recipes.undertrained_reason`.
    """

    steps: int
    start_loss: float
    final_loss: float
    tokens_trained: int
    rows: int
    dropped: tuple[str, ...]
    train_s: float
    vocab_size: int = 0
    tokens_computed: int = 0
    resumed_at_step: int = 0
    """the step of the checkpoint this run went on from (0: it trained from its first step)"""

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "dropped": list(self.dropped)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainingResult:
        return cls(**{**raw, "dropped": tuple(raw["dropped"])})


ProgressCallback = Callable[[ProgressEvent], None]


def attach_lora(model: Any, config: TrainingConfig, resume_from: str | Path | None = None) -> Any:
    """Wrap ``model`` in a trainable peft adapter: a new one shaped by ``config`` (initialised from
    ``config.seed``), or the saved adapter directory ``resume_from`` (its own shape; trainable). Either
    holds the process's model-loading lock (:func:`learnerd.ml.loader.loading`): peft changes ``model`` in
    place and draws the new adapter from torch's global generator, which a load beside it would also draw from.

    Returns:
        a ``peft.PeftModel``; only the adapter's parameters require grad.

    Raises:
        ModelCheckError: the resumed adapter failed the loader's known-answer check
            (:func:`learnerd.ml.loader.load_adapter`).
    """
    import torch
    from peft import LoraConfig, TaskType, get_peft_model

    with loading():
        torch.manual_seed(config.seed)
        if resume_from is not None:
            return load_adapter(model, resume_from, trainable=True)
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=config.peft_target_modules(),
            use_dora=config.adapter == "dora",
            bias="none",
            task_type=TaskType.CAUSAL_LM,
        )
        return get_peft_model(model, lora)


def train_lora(
    model: Any,
    tokenizer: Any,
    rows: Sequence[TrainingRow],
    config: TrainingConfig,
    *,
    resume_from: str | Path | None = None,
    on_progress: ProgressCallback | None = None,
    rehearsal: Sequence[TrainingRow] = (),
    rehearsal_per_epoch: int = 0,
    checkpoint: TrainingCheckpoint | None = None,
) -> tuple[Any, TrainingResult]:
    """Train a LoRA adapter on ``rows`` (and a share of ``rehearsal`` each epoch) for one cycle of
    ``config.total_steps(len(rows) + rehearsal_per_epoch)`` steps.

    Args:
        model: a transformers causal LM on any device (batches follow its parameters); it is wrapped
            in place by peft.
        tokenizer: its tokenizer (chat rows need a chat template).
        rows: the rows of this cycle (new rows plus any replay sample: the caller chooses); a ``max_steps``
            budget that ends within one epoch trains only :func:`budget_rows` of them.
        config: hyperparameters; rows are truncated to ``sequence_len`` tokens (or the model's
            ``max_position_embeddings`` when shorter); ``seed`` fixes everything random.
        resume_from: a saved adapter directory to continue from, or None for a fresh adapter.
        on_progress: called after every optimizer step with a :class:`ProgressEvent`.
        rehearsal: rows of which each epoch trains the next ``rehearsal_per_epoch`` in turn (the module
            docstring); at most ``len(rehearsal)`` an epoch, so a budget as large as they are trains all of them
            every epoch, as ``rows`` are.
        rehearsal_per_epoch: rehearsal rows per epoch (>= 0).
        checkpoint: where to save this training's state every ``checkpoint.every_s`` seconds, and whence to go on
            when it holds this training's (:mod:`learnerd.training.checkpoint`: the saved progress events are passed to
            ``on_progress`` again first); None: no checkpoints.

    Returns:
        ``(peft_model, result)``: the adapted model (in eval mode; ``save_pretrained`` writes the adapter).

    Raises:
        RowEncodingError: a row cannot be encoded (e.g. chat rows on a base without a chat template),
            or no row has a token to learn.
        TrainingConfigError: ``config`` asks for what learnerd cannot train (see ``check_trainable``).
    """
    import torch
    from transformers import get_scheduler

    check_trainable(config)

    max_length = min(config.sequence_len, getattr(model.config, "max_position_embeddings", None) or config.sequence_len)
    encoded, dropped = encode_rows(tokenizer, budget_rows(rows, config), max_length)
    rehearsed, dropped_rehearsal = encode_rows(tokenizer, rehearsal if rehearsal_per_epoch > 0 else (), max_length)
    if not encoded:
        raise RowEncodingError("no training row has a token to learn (no rows, or all truncated away)")
    per_epoch = min(rehearsal_per_epoch, len(rehearsed)) if rehearsed else 0  # dropped rows leave the share
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    vocab_size = int(getattr(model.config, "vocab_size", 0) or 0)
    peft_model = attach_lora(model, config, resume_from)
    batch_size, accumulation = config.batch_size(), config.accumulation()
    total_steps = config.total_steps(len(encoded) + per_epoch)
    scored = [*encoded, *rehearsed] if per_epoch else encoded
    saved = checkpoint.load() if checkpoint is not None else None

    named = [(n, p) for n, p in peft_model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
    scheduler = get_scheduler(
        config.lr_scheduler,
        optimizer,
        num_warmup_steps=math.ceil(config.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )
    order = torch.Generator().manual_seed(config.seed)
    batches = _micro_batches(
        encoded, batch_size, order, by_length=config.group_by_length, rehearsal=rehearsed, per_epoch=per_epoch
    )
    peft_model.train()
    tokens = computed = done = 0
    events: list[dict[str, Any]] = []
    if saved is not None:
        try:
            done, tokens, computed, events = _restore(saved, named, optimizer, scheduler, batches, accumulation)
        except ValueError as exc:  # refused before anything was loaded: train from the first step
            log.warning(
                "training.checkpoint_unreadable", path=str(checkpoint.path if checkpoint else ""), error=str(exc)
            )
            saved = None
    start_loss = float(saved["start_loss"]) if saved is not None else mean_loss(peft_model, scored, pad_id, batch_size)
    if on_progress is not None:
        for event in events:
            on_progress(ProgressEvent(**{**event, "restored": True}))
    started = time.perf_counter() - (events[-1]["elapsed_s"] if events else 0.0)
    last_saved = time.perf_counter()
    for step in range(done + 1, total_steps + 1):
        group = [next(batches) for _ in range(accumulation)]
        num_items = sum(_loss_tokens(b) for b in group)
        step_loss = 0.0
        for batch in group:
            input_ids, attention_mask, labels = _collate(batch, pad_id, peft_model.device)
            out = peft_model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                labels=labels,
                num_items_in_batch=torch.tensor(num_items),
            )
            loss = out.loss
            if config.replay_kl_weight:
                kl = replay_kl(peft_model, batch, input_ids, attention_mask, labels, out.logits)
                loss = loss + config.replay_kl_weight * kl / num_items
            loss.backward()
            step_loss += float(out.loss.detach())
            tokens += int(attention_mask.sum())
            computed += attention_mask.numel()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        event = ProgressEvent(
            step=step,
            total_steps=total_steps,
            loss=step_loss,
            learning_rate=float(scheduler.get_last_lr()[0]),
            tokens=tokens,
            elapsed_s=time.perf_counter() - started,
        )
        events.append(dataclasses.asdict(event))
        if on_progress is not None:
            on_progress(event)
        if checkpoint is not None and step < total_steps and time.perf_counter() - last_saved >= checkpoint.every_s:
            checkpoint.save(
                {
                    "step": step,
                    "tokens": tokens,
                    "computed": computed,
                    "start_loss": start_loss,
                    "events": events,
                    "params": {n: p.detach().cpu().clone() for n, p in named},
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": torch.get_rng_state(),
                }
            )
            last_saved = time.perf_counter()
    train_s = time.perf_counter() - started
    peft_model.eval()
    final_loss = mean_loss(peft_model, scored, pad_id, batch_size)
    result = TrainingResult(
        steps=total_steps,
        start_loss=start_loss,
        final_loss=final_loss,
        tokens_trained=tokens,
        rows=len(encoded) + per_epoch,
        dropped=tuple(dropped) + tuple(dropped_rehearsal),
        train_s=train_s,
        vocab_size=vocab_size,
        tokens_computed=computed,
        resumed_at_step=done,
    )
    return peft_model, result


def _restore(
    saved: dict[str, Any],
    named: Sequence[tuple[str, Any]],
    optimizer: Any,
    scheduler: Any,
    batches: Iterator[list[EncodedRow]],
    accumulation: int,
) -> tuple[int, int, int, list[dict[str, Any]]]:
    """Load a checkpoint's state into the run (the module :mod:`learnerd.training.checkpoint`): parameters, optimizer,
    schedule, torch's CPU generator, and the micro-batches its steps drew skipped. Returns ``(step, tokens,
    computed, events)``.

    Raises:
        ValueError: the checkpoint's parameters or optimizer groups are not this run's; nothing was loaded.
    """
    import torch

    by_name, params = dict(named), saved["params"]
    if set(params) != set(by_name) or any(params[n].shape != p.shape for n, p in named):
        raise ValueError("the checkpoint's parameters are not this adapter's")
    # raises ValueError on groups of other sizes, before it changes anything
    optimizer.load_state_dict(saved["optimizer"])
    with torch.no_grad():
        for name, value in params.items():
            by_name[name].copy_(value)
    scheduler.load_state_dict(saved["scheduler"])
    step = int(saved["step"])
    for _ in range(step * accumulation):
        next(batches)
    torch.set_rng_state(saved["rng"])
    return step, int(saved["tokens"]), int(saved["computed"]), list(saved["events"])


def replay_kl(
    peft_model: Any, batch: Sequence[EncodedRow], input_ids: Any, attention_mask: Any, labels: Any, logits: Any
) -> Any:
    """KL(base ‖ adapted) of the next-token distributions, in nats, summed over the loss-carrying tokens of the
    batch's general replay rows (a 0-d float tensor with gradient through ``logits``; 0 when the batch has
    none). ``input_ids`` / ``attention_mask`` / ``labels``: the batch as :func:`_collate` lays it out,
    ``(rows, length)`` int64; ``logits``: the adapted model's output on it, ``(rows, length, vocab)``.

    The base's forward pass sees the replay rows alone, cut to the longest of them: the other rows of the
    batch (document, multi-turn and retrieval rows, often longer) carry no KL term, and right padding changes
    no logit of a causal model at a real position, so the result is the whole batch's up to float rounding."""
    import torch
    import torch.nn.functional as F

    flags = [is_replay(row.section_id) for row in batch]
    if not any(flags):
        return logits.sum() * 0.0
    replay = torch.tensor(flags, device=labels.device)
    width = max(len(row.input_ids) for row, flag in zip(batch, flags, strict=True) if flag)
    mask = labels[replay, 1:width] != IGNORE_INDEX
    if not bool(mask.any()):
        return logits.sum() * 0.0
    with torch.no_grad(), peft_model.disable_adapter():
        base_logits = peft_model(
            input_ids=input_ids[replay, :width], attention_mask=attention_mask[replay, :width]
        ).logits
    log_adapted = F.log_softmax(logits[replay, : width - 1][mask].float(), dim=-1)
    log_base = F.log_softmax(base_logits[:, :-1][mask].float(), dim=-1)
    return F.kl_div(log_adapted, log_base, log_target=True, reduction="sum")


def mean_loss(model: Any, encoded: Sequence[EncodedRow], pad_id: int, batch_size: int = 8) -> float:
    """Mean cross-entropy per loss-carrying token (nats) of ``model`` over ``encoded``, without
    dropout and without gradients. Leaves the model in the train/eval mode it found it in."""
    import torch

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(encoded), batch_size):
            batch = encoded[i : i + batch_size]
            input_ids, attention_mask, labels = _collate(batch, pad_id, model.device)
            n = _loss_tokens(batch)
            out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=n)
            total += float(out.loss) * n
            count += n
    model.train(was_training)
    return total / count


def rows_loss(model: Any, tokenizer: Any, rows: Sequence[TrainingRow], sequence_len: int = 2048) -> float:
    """:func:`mean_loss` of ``model`` on ``rows`` encoded as the trainer encodes them (nats/token)."""
    encoded, _ = encode_rows(tokenizer, rows, sequence_len)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    return mean_loss(model, encoded, pad_id)


def budget_rows(rows: Sequence[TrainingRow], config: TrainingConfig) -> Sequence[TrainingRow]:
    """The rows a cycle of ``config`` reaches: all of ``rows``, unless ``max_steps`` ends the cycle within
    its first epoch; then ``max_steps × batch_size × accumulation`` of them, sampled with ``seed``
    (``random.Random``) and kept in their order."""
    if config.max_steps is None:
        return rows
    reached = config.max_steps * config.batch_size() * config.accumulation()
    if reached >= len(rows):
        return rows
    return [rows[i] for i in sorted(random.Random(config.seed).sample(range(len(rows)), reached))]


def _micro_batches(
    encoded: Sequence[EncodedRow],
    batch_size: int,
    generator: Any,
    *,
    by_length: bool = False,
    rehearsal: Sequence[EncodedRow] = (),
    per_epoch: int = 0,
) -> Iterator[list[EncodedRow]]:
    """Endless micro-batches: each epoch a fresh permutation of the rows, cut into ``batch_size`` slices.

    With ``per_epoch`` > 0 an epoch's rows are ``encoded`` and the next ``per_epoch`` of ``rehearsal``
    (``per_epoch`` <= ``len(rehearsal)``), read in turn from permutations of ``rehearsal`` drawn from
    ``generator`` (a new one when the last is used up), so every rehearsal row comes round before any comes twice.

    With ``by_length`` the permutation is transformers' ``get_length_grouped_indices`` (what the Trainer's
    ``group_by_length`` samples): the permuted rows are cut into at least four mega-batches (at most 50
    micro-batches each), each sorted by token count, longest first, so a micro-batch holds rows of similar length
    and pads less. Every row is still trained once per epoch; only which rows share a micro-batch changes."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    turn: list[int] = []
    while True:
        rows = list(encoded)
        while len(rows) < len(encoded) + per_epoch:
            if not turn:
                turn = torch.randperm(len(rehearsal), generator=generator).tolist()
            rows.append(rehearsal[turn.pop(0)])
        if by_length:
            perm = get_length_grouped_indices([len(row.input_ids) for row in rows], batch_size, generator=generator)
        else:
            perm = torch.randperm(len(rows), generator=generator).tolist()
        for i in range(0, len(perm), batch_size):
            yield [rows[j] for j in perm[i : i + batch_size]]


def _loss_tokens(batch: Sequence[EncodedRow]) -> int:
    return sum(row.loss_tokens for row in batch)


def _collate(batch: Sequence[EncodedRow], pad_id: int, device: Any = "cpu") -> tuple[Any, Any, Any]:
    """Right-padded ``(input_ids, attention_mask, labels)``, int64 tensors of shape ``(len(batch), longest)``
    on ``device``."""
    import torch

    width = max(len(row.input_ids) for row in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    for i, row in enumerate(batch):
        n = len(row.input_ids)
        input_ids[i, :n] = torch.tensor(row.input_ids)
        attention_mask[i, :n] = 1
        labels[i, :n] = torch.tensor(row.labels)
    return input_ids.to(device), attention_mask.to(device), labels.to(device)
