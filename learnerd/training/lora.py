"""The LoRA step loop (peft on a transformers causal LM), in-process.

:func:`train_lora` wraps a base model in a fresh LoRA adapter — or resumes a saved one — and trains it on encoded
rows with AdamW, a warm-up + ``lr_scheduler`` schedule (``transformers.get_scheduler``), gradient clipping at 1.0
and gradient accumulation. A step's loss is the mean cross-entropy per loss-carrying token over its micro-batches
(nats/token, as the transformers Trainer's ``num_items_in_batch``) plus each ingredient's loss term
(:mod:`learnerd.training.ingredients`); reported losses are the cross-entropy alone. Logits are computed at the
loss-carrying positions only (:mod:`learnerd.training.loss`): the rest of a row costs no vocabulary-wide floats.
The start and final losses are measured on a seeded sample of at most :data:`LOSS_SAMPLE_ROWS` rows
(:func:`loss_sample`). A base of :data:`CHECKPOINT_ACTIVATIONS_FROM` parameters or more recomputes its layers'
activations in the backward pass instead of keeping them (gradient checkpointing, Chen et al. 2016, "Training Deep
Nets with Sublinear Memory Cost"; :func:`checkpoint_activations`): the training process's memory stays bounded.

Deterministic for a fixed ``seed`` and number of torch threads: the adapter's initial weights, the dropout masks
and the row order come from generators seeded with it. Rows are shuffled once per epoch. A ``max_steps`` budget
that ends within the first epoch trains, and tokenises, a seeded sample of the rows it reaches
(:func:`budget_rows`). An incremental cycle's rehearsed rows share a budget: each epoch trains every row of
``rows`` and the next ``rehearsal_per_epoch`` rehearsal rows, in turn from seeded permutations of them, so
every rehearsal row comes round before any comes twice.

:mod:`learnerd.training.worker` runs it in a child process, so the daemon's event loop never waits on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.loader import load_adapter, loading
from learnerd.ml.rows import IGNORE_INDEX, EncodedRow, RowEncodingError, TrainingRow, encode_rows, padding_id
from learnerd.store.dlm import TrainingConfig
from learnerd.training import ingredients
from learnerd.training.checkpoint import TrainingCheckpoint
from learnerd.training.config import check_trainable
from learnerd.training.ingredients.spec import Batch
from learnerd.training.loss import cross_entropy_sum, loss_logits, loss_mask, loss_targets

log = structlog.get_logger(__name__)

MAX_GRAD_NORM = 1.0
LOSS_SAMPLE_ROWS = 64
"""The start and final losses are measured on at most this many rows (:func:`loss_sample`)."""
CHECKPOINT_ACTIVATIONS_FROM = 50_000_000
"""Base parameters from which training checkpoints activations (:func:`checkpoint_activations`). Measured on
2026-12-01 (``benchmarks/bench_shared_cores.py --skip-tiny --smollm2-rows 38``): a 38-pair SmolLM2-135M cycle's
training process peaked at 3,347 MiB without, 1,923 MiB with, for about a third more time per step; the built-in
tiny models (under 1 M parameters) keep their activations: they are small and their steps are short."""
START_LOSS = "start loss"
FINAL_LOSS = "final loss"


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

    ``start_loss`` and ``final_loss`` are the mean cross-entropy per loss-carrying token (nats) of the same seeded
    sample of at most :data:`LOSS_SAMPLE_ROWS` of the rows trained on (:func:`loss_sample`; all of them when
    fewer), measured without dropout before the first step and after the last one.
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
    peak_rss_mb: float = 0.0
    """the training process's peak resident memory (MiB; 0: not measured, as when trained in-process)"""

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "dropped": list(self.dropped)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainingResult:
        return cls(**{**raw, "dropped": tuple(raw["dropped"])})


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class PhaseEvent:
    """A training process's work before or after its steps: ``phase`` (``"loading base"``, ``"base answers"``,
    :data:`START_LOSS`, :data:`FINAL_LOSS`), ``done`` of ``total`` ``unit``\\ s (``total`` None: not counted)."""

    phase: str
    done: int = 0
    total: int | None = None
    unit: str = "row"


PhaseCallback = Callable[[PhaseEvent], None]


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


def _phase_loss(
    model: Any, sample: list[EncodedRow], pad_id: int, batch_size: int, on_phase: PhaseCallback | None, phase: str
) -> float:
    """:func:`mean_loss` of ``sample``, each batch scored reported to ``on_phase`` as ``phase``."""

    def done(rows: int) -> None:
        if on_phase is not None:
            on_phase(PhaseEvent(phase, rows, len(sample)))

    done(0)
    return mean_loss(model, sample, pad_id, batch_size, on_batch=done)


def checkpoint_activations(model: Any) -> bool:
    """Turn on gradient checkpointing (non-reentrant, as peft's adapters need no input gradients then) for a
    transformers ``model`` of at least :data:`CHECKPOINT_ACTIVATIONS_FROM` parameters that supports it; whether it
    did. It acts in training mode only: evaluation and the losses under ``no_grad`` run as before."""
    big = sum(p.numel() for p in model.parameters()) >= CHECKPOINT_ACTIVATIONS_FROM
    if not big or not getattr(model, "supports_gradient_checkpointing", False):
        return False
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    log.info("training.checkpointing_activations", parameters_from=CHECKPOINT_ACTIVATIONS_FROM)
    return True


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
    on_phase: PhaseCallback | None = None,
) -> tuple[Any, TrainingResult]:
    """Train a LoRA adapter on ``rows`` (and a share of ``rehearsal`` each epoch) for one cycle of
    ``config.total_steps(len(rows) + rehearsal_per_epoch)`` steps.

    Args:
        model: a transformers causal LM on any device (batches follow its parameters); peft wraps it in place.
        tokenizer: its tokenizer (chat rows need a chat template).
        rows: the rows every epoch trains; a ``max_steps`` budget within one epoch trains :func:`budget_rows`.
        config: the ``training`` block; rows are cut to ``sequence_len`` tokens (or the model's
            ``max_position_embeddings`` when shorter); ``seed`` fixes everything random.
        resume_from: a saved adapter directory to continue from, or None for a fresh adapter.
        on_progress: called after every optimizer step with a :class:`ProgressEvent`.
        rehearsal, rehearsal_per_epoch: each epoch also trains the next ``rehearsal_per_epoch`` (>= 0; at most
            all) of ``rehearsal``, in turn (the module docstring).
        checkpoint: where to save this training's state every ``checkpoint.every_s`` seconds, and whence to go on
            (:mod:`learnerd.training.checkpoint`; its saved progress events reach ``on_progress`` first); None: none.
        on_phase: called with a :class:`PhaseEvent` as the start and final losses' rows are scored.

    Returns:
        ``(peft_model, result)``: the adapted model (in eval mode; ``save_pretrained`` writes the adapter).

    Raises:
        RowEncodingError: a row cannot be encoded, or no row has a token to learn.
        TrainingConfigError: ``config`` asks for what learnerd cannot train (``check_trainable``).
    """
    config = check_trainable(config)
    data = _encode(model, tokenizer, rows, config, rehearsal, rehearsal_per_epoch)
    checkpoint_activations(model)
    peft_model = attach_lora(model, config, resume_from)
    total_steps = config.total_steps(len(data.encoded) + data.per_epoch)
    saved = checkpoint.load() if checkpoint is not None else None
    loop = _Loop(peft_model, config, data, total_steps)
    peft_model.train()
    if saved is not None and not loop.restore(saved, checkpoint):
        saved = None
    resumed_at_step = loop.done
    sample = loss_sample(data.scored, config.seed)
    scored = functools.partial(_phase_loss, peft_model, sample, data.pad_id, config.batch_size(), on_phase)
    start_loss = float(saved["start_loss"]) if saved else scored(START_LOSS)
    if on_progress is not None:
        for restored in loop.events:
            on_progress(ProgressEvent(**{**restored, "restored": True}))
    started = time.perf_counter() - (loop.events[-1]["elapsed_s"] if loop.events else 0.0)
    last_saved = time.perf_counter()
    for step in range(resumed_at_step + 1, total_steps + 1):
        event = loop.step(step, started)
        if on_progress is not None:
            on_progress(event)
        if checkpoint is not None and step < total_steps and time.perf_counter() - last_saved >= checkpoint.every_s:
            checkpoint.save(loop.state(step, start_loss))
            last_saved = time.perf_counter()
    train_s = time.perf_counter() - started
    peft_model.eval()
    result = TrainingResult(
        steps=total_steps,
        start_loss=start_loss,
        final_loss=scored(FINAL_LOSS),
        tokens_trained=loop.tokens,
        rows=len(data.encoded) + data.per_epoch,
        dropped=data.dropped,
        train_s=train_s,
        vocab_size=int(getattr(model.config, "vocab_size", 0) or 0),
        tokens_computed=loop.computed,
        resumed_at_step=resumed_at_step,
    )
    return peft_model, result


@dataclass(frozen=True)
class _Encoded:
    """A run's rows as token ids: ``encoded`` (every epoch), ``rehearsed`` (``per_epoch`` of them an epoch), those
    both score (``scored``), the section ids of the rows truncation left without a loss token, and the pad id."""

    encoded: list[EncodedRow]
    rehearsed: list[EncodedRow]
    per_epoch: int
    scored: list[EncodedRow]
    dropped: tuple[str, ...]
    pad_id: int


def _encode(
    model: Any,
    tokenizer: Any,
    rows: Sequence[TrainingRow],
    config: TrainingConfig,
    rehearsal: Sequence[TrainingRow],
    rehearsal_per_epoch: int,
) -> _Encoded:
    """Encode the rows a run of ``config`` trains. Raises ``RowEncodingError`` as :func:`train_lora`."""
    max_length = min(config.sequence_len, getattr(model.config, "max_position_embeddings", None) or config.sequence_len)
    encoded, dropped = encode_rows(tokenizer, budget_rows(rows, config), max_length)
    rehearsed, dropped_rehearsal = encode_rows(tokenizer, rehearsal if rehearsal_per_epoch > 0 else (), max_length)
    if not encoded:
        raise RowEncodingError("no training row has a token to learn (no rows, or all truncated away)")
    per_epoch = min(rehearsal_per_epoch, len(rehearsed)) if rehearsed else 0  # dropped rows leave the share
    pad_id = padding_id(tokenizer)
    scored = [*encoded, *rehearsed] if per_epoch else encoded
    return _Encoded(encoded, rehearsed, per_epoch, scored, (*dropped, *dropped_rehearsal), pad_id)


class _Loop:
    """One run's optimizer (AdamW), learning-rate schedule, micro-batches, loss terms and counters."""

    def __init__(self, peft_model: Any, config: TrainingConfig, data: _Encoded, total_steps: int) -> None:
        import torch
        from transformers import get_scheduler

        self.model, self.pad_id, self.accumulation = peft_model, data.pad_id, config.accumulation()
        self.named = [(n, p) for n, p in peft_model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in self.named]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate, weight_decay=0.0)
        self.scheduler = get_scheduler(
            config.lr_scheduler,
            self.optimizer,
            num_warmup_steps=math.ceil(config.warmup_ratio * total_steps),
            num_training_steps=total_steps,
        )
        order = torch.Generator().manual_seed(config.seed)
        self.batches = _micro_batches(
            data.encoded,
            config.batch_size(),
            order,
            by_length=config.group_by_length,
            rehearsal=data.rehearsed,
            per_epoch=data.per_epoch,
        )
        self.terms = [(i.loss, i.options.of(config)) for i in ingredients.INGREDIENTS if i.loss is not None]
        self.total_steps = total_steps
        self.done = self.tokens = self.computed = 0
        self.events: list[dict[str, Any]] = []

    def step(self, step: int, started: float) -> ProgressEvent:
        """Train optimizer step ``step``: ``accumulation`` micro-batches, each's cross-entropy (summed over its
        loss tokens and divided by the step's, as the transformers Trainer's ``num_items_in_batch``) plus the
        ingredients' loss terms, then clipping, AdamW and the schedule."""
        import torch

        group = [next(self.batches) for _ in range(self.accumulation)]
        num_items = sum(_loss_tokens(b) for b in group)
        step_loss = 0.0
        for batch in group:
            input_ids, attention_mask, labels = _collate(batch, self.pad_id, self.model.device)
            logits = loss_logits(self.model, input_ids, attention_mask, loss_mask(labels))
            cross_entropy = cross_entropy_sum(logits, loss_targets(labels)) / num_items
            loss = cross_entropy
            for term_of, options in self.terms:
                term = term_of(options, Batch(self.model, tuple(batch), input_ids, attention_mask, labels, logits))
                if term is not None:
                    loss = loss + term / num_items
            loss.backward()
            step_loss += float(cross_entropy.detach())
            del logits, loss, cross_entropy  # the next micro-batch's graph is built without this one's
            self.tokens += int(attention_mask.sum())
            self.computed += attention_mask.numel()
        torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.done = step
        event = ProgressEvent(
            step=step,
            total_steps=self.total_steps,
            loss=step_loss,
            learning_rate=float(self.scheduler.get_last_lr()[0]),
            tokens=self.tokens,
            elapsed_s=time.perf_counter() - started,
        )
        self.events.append(dataclasses.asdict(event))
        return event

    def state(self, step: int, start_loss: float) -> dict[str, Any]:
        """What a checkpoint after ``step`` holds (:mod:`learnerd.training.checkpoint`)."""
        import torch

        return {
            "step": step,
            "tokens": self.tokens,
            "computed": self.computed,
            "start_loss": start_loss,
            "events": self.events,
            "params": {n: p.detach().cpu().clone() for n, p in self.named},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }

    def restore(self, saved: dict[str, Any], checkpoint: TrainingCheckpoint | None) -> bool:
        """Load a checkpoint's state: parameters, optimizer, schedule, torch's CPU generator, and the micro-batches
        its steps drew skipped. False (logged) when it is not this run's: nothing was loaded, training starts at
        step 1."""
        import torch

        by_name, params = dict(self.named), saved["params"]
        if set(params) != set(by_name) or any(params[n].shape != p.shape for n, p in self.named):
            return _unreadable(checkpoint, "the checkpoint's parameters are not this adapter's")
        try:
            self.optimizer.load_state_dict(saved["optimizer"])  # raises on groups of other sizes, changing nothing
        except ValueError as exc:
            return _unreadable(checkpoint, str(exc))
        with torch.no_grad():
            for name, value in params.items():
                by_name[name].copy_(value)
        self.scheduler.load_state_dict(saved["scheduler"])
        self.done = int(saved["step"])
        for _ in range(self.done * self.accumulation):
            next(self.batches)
        torch.set_rng_state(saved["rng"])
        self.tokens, self.computed, self.events = int(saved["tokens"]), int(saved["computed"]), list(saved["events"])
        return True


def _unreadable(checkpoint: TrainingCheckpoint | None, error: str) -> bool:
    log.warning("training.checkpoint_unreadable", path=str(checkpoint.path if checkpoint else ""), error=error)
    return False


def mean_loss(
    model: Any,
    encoded: Sequence[EncodedRow],
    pad_id: int,
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
) -> float:
    """Mean cross-entropy per loss-carrying token (nats) of ``model`` over ``encoded``, without
    dropout and without gradients; ``on_batch(rows_done)`` after each batch. Leaves the model in the train/eval
    mode it found it in."""
    import torch

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(encoded), batch_size):
            batch = encoded[i : i + batch_size]
            input_ids, attention_mask, labels = _collate(batch, pad_id, model.device)
            logits = loss_logits(model, input_ids, attention_mask, loss_mask(labels))
            total += float(cross_entropy_sum(logits, loss_targets(labels)))
            count += _loss_tokens(batch)
            if on_batch is not None:
                on_batch(min(i + batch_size, len(encoded)))
    model.train(was_training)
    return total / count


def loss_sample(encoded: Sequence[EncodedRow], seed: int, size: int = LOSS_SAMPLE_ROWS) -> list[EncodedRow]:
    """The rows the start and final losses are measured on: all of ``encoded`` when there are at most ``size``,
    else ``size`` of them drawn with ``seed`` (``random.Random``), kept in their order — the same rows before and
    after training, so the two losses compare; a few dozen rows estimate a mean per token well enough for the
    undertrained check (:func:`learnerd.training.recipes.undertrained_reason`) at a fraction of a pass over
    hundreds."""
    if len(encoded) <= size:
        return list(encoded)
    return [encoded[i] for i in sorted(random.Random(seed).sample(range(len(encoded)), size))]


def rows_loss(model: Any, tokenizer: Any, rows: Sequence[TrainingRow], sequence_len: int = 2048) -> float:
    """:func:`mean_loss` of ``model`` on ``rows`` encoded as the trainer encodes them (nats/token)."""
    encoded, _ = encode_rows(tokenizer, rows, sequence_len)
    pad_id = padding_id(tokenizer)
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
