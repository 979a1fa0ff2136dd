"""The differential backend: one loaded base model with its LoRA adapter, seen two ways.

After sway's HF backend (``backends/hf.py``): the base is loaded once and the adapter attached once;
the **base** view runs inside peft's ``disable_adapter()`` (the LoRA deltas are skipped), the
**fine-tuned** view runs with them. A third view, :meth:`DifferentialBackend.as_null_adapter`, replaces
every ``lora_A`` / ``lora_B`` tensor with seeded Gaussian noise of the same shape for its duration — an
adapter of the same rank, alpha and target modules that learned nothing, the denominator of every
z-score — and puts the trained weights back on exit, even on error.

Each :class:`View` gives, for token ids the caller built (see :mod:`learnerd.eval.inputs`):

* :meth:`View.next_token_dist` — the top-k of the next-token distribution, tail mass kept;
* :meth:`View.logprob` — the log-likelihood of a continuation given a context, in nats;
* :meth:`View.generate` — greedy decoding until an end-of-sequence id;

and their batched forms (``next_token_dists``, ``logprobs``, ``generate_many``), which run many inputs per forward
pass: padded batches of at most :data:`MAX_BATCH_TOKENS` tokens and :data:`LOGITS_BATCH_BYTES` of logits; a
generation decodes at most :data:`GENERATION_ROWS` sequences together, keeping at most
:data:`GENERATION_LOGITS_BYTES` of logits. Before every batch the backend checks its cancel event (a
``threading.Event`` another thread may set) and raises :class:`EvaluationCancelled`, and a generation checks it at
every decoding step too, so a running evaluation stops within one forward pass.

Every forward pass checks that the logits are finite: a NaN or inf raises :class:`NonFiniteLogitsError`
naming the view, so no probe ever computes on garbage. Log-softmax runs in float64. Results of the base
view are cached per input (the base never changes), which makes null-adapter calibration cost only the
other side's forward passes; its log-likelihoods, next-token distributions and answers to a fixed pool are kept
between evaluations too when the backend has the stores (:mod:`learnerd.eval.base_logprobs`,
:mod:`learnerd.eval.base_answers`).
Not thread-safe: one evaluation at a time per backend.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from learnerd.eval.base_answers import Answers, BaseAnswerStore
from learnerd.eval.base_logprobs import BaseLogprobStore, dist_key, item_key
from learnerd.ml.base_model import BaseModelRef, load_model_directory
from learnerd.ml.choice import choose_command
from learnerd.ml.device import Placement
from learnerd.ml.divergence import TokenDist
from learnerd.ml.generate import BlockEnds, cut_at_block, ended_with_eos, greedy_inputs, until_eos
from learnerd.ml.loader import load_adapter
from learnerd.ml.rows import padding_id
from learnerd.store.adapters import AdapterVersion

NULL_INIT_SCALE = 0.02
"""Standard deviation of a null adapter's ``lora_A`` / ``lora_B`` entries (sway's ``init_scale``)."""
LOGITS_BATCH_BYTES = 128 * 2**20
"""Bytes of float32 logits one batched forward pass may produce (``padded tokens × vocabulary × 4``)."""
MAX_BATCH_TOKENS = 8192
"""Padded tokens per batch at most, whatever the vocabulary (bounds the attention's memory too)."""
GENERATION_ROWS = 32
"""Sequences one batched greedy generation decodes together at most. Decoding a small model on a CPU reads every
weight at each step, whatever the batch: SmolLM2-135M-Instruct on one thread answered 64 prompts × 32 tokens in
54 s in batches of 8, 36 s of 16 and 28 s of 32 (2026-12-02, beside another job)."""
GENERATION_LOGITS_BYTES = 256 * 2**20
"""Bytes of float32 logits one batched generation keeps (``rows × new tokens × vocabulary × 4``: every step's, for
the finiteness check and the first step's distribution)."""


class EvaluationCancelled(BaseException):
    """The evaluation was asked to stop (its cancel event was set). A ``BaseException``, like
    ``asyncio.CancelledError``, so no probe's error handling turns it into an ``error`` result."""


class NonFiniteLogitsError(RuntimeError):
    """A view produced NaN or inf logits (a broken adapter or base): nothing can be measured on it."""


class DifferentialBackend:
    """Base and fine-tuned views over one ``peft.PeftModel``.

    Args:
        model: a ``PeftModel`` (eval mode) whose adapter is the one under evaluation.
        tokenizer: its tokenizer.
        cancel: when set (from any thread), the next batch raises :class:`EvaluationCancelled`.
        answer_store: where the base view's ``answers(..., persist=True)`` are kept between evaluations (None:
            not kept).
        logprob_store: where the base view's log-likelihoods are kept between evaluations (None: not kept).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        cancel: threading.Event | None = None,
        answer_store: BaseAnswerStore | None = None,
        logprob_store: BaseLogprobStore | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cancel = cancel or threading.Event()
        self.answer_store = answer_store
        self.logprob_store = logprob_store
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.batch_tokens = max(1, min(MAX_BATCH_TOKENS, LOGITS_BATCH_BYTES // (4 * self.vocab_size)))
        generation = getattr(model, "generation_config", None)
        eos = getattr(generation, "eos_token_id", None) if generation is not None else None
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self._pad_id = padding_id(tokenizer, self.eos_ids)
        base_model = model.get_base_model() if hasattr(model, "get_base_model") else model
        #: The forward argument that takes a KV cache, and the output's field that holds it: ``cache`` from
        #: transformers 5 on (which deprecates ``past_key_values`` in both places with a warning), ``past_key_values``
        #: before.
        self.cache_keyword = (
            "cache" if "cache" in inspect.signature(base_model.forward).parameters else "past_key_values"
        )
        self._active: str | None = None
        self._base_cache: dict[tuple[Any, ...], Any] = {}
        self.forward_passes = 0

    @classmethod
    def load(
        cls,
        base: BaseModelRef,
        version: AdapterVersion,
        placement: Placement | None = None,
        *,
        cancel: threading.Event | None = None,
        answer_cache_dir: Path | None = None,
    ) -> DifferentialBackend:
        """Load ``base`` (offline; on ``placement``, default CPU float32) and attach ``version``'s adapter,
        through the process's one loader (:mod:`learnerd.ml.loader`: one lock, a known-answer check after
        each load). With ``answer_cache_dir`` (the model cache), the base's persisted answers and its
        log-likelihoods are kept there (:class:`~learnerd.eval.base_answers.BaseAnswerStore` and
        :class:`~learnerd.eval.base_logprobs.BaseLogprobStore` of ``base.identity``).

        Raises:
            BaseModelError: the base cannot be loaded.
            ModelCheckError: the base or the base with the adapter failed its known-answer check.
            OSError / ValueError: peft cannot load the adapter directory.
        """
        model, tokenizer = load_model_directory(base.path, name=base.name, placement=placement)
        backend = cls(load_adapter(model, version), tokenizer, cancel=cancel)
        if answer_cache_dir is not None:
            backend.answer_store = BaseAnswerStore(answer_cache_dir, base.identity)
            backend.logprob_store = BaseLogprobStore(answer_cache_dir, base.identity, backend.placement())
        return backend

    def placement(self) -> tuple[str, str]:
        """The model's device and dtype, as the base stores' keys name them (``("cpu", "torch.float32")``)."""
        return str(self.model.device), str(self.model.dtype)

    def check_cancelled(self) -> None:
        """Raise :class:`EvaluationCancelled` when the cancel event is set (checked before every batch)."""
        if self.cancel.is_set():
            raise EvaluationCancelled("evaluation cancelled")

    @contextlib.contextmanager
    def as_base(self) -> Iterator[View]:
        """The base model's view (adapter disabled)."""
        with self._entered("base"), self.model.disable_adapter():
            yield View(self, "base")

    @contextlib.contextmanager
    def as_finetuned(self) -> Iterator[View]:
        """The fine-tuned view (the adapter under evaluation)."""
        with self._entered("ft"):
            yield View(self, "ft")

    @contextlib.contextmanager
    def as_null_adapter(
        self, seed: int, init_scale: float = NULL_INIT_SCALE, *, module_order: bool = True
    ) -> Iterator[View]:
        """A view through a random-noise adapter of the trained one's shape: every ``lora_A`` / ``lora_B``
        entry drawn from N(0, ``init_scale``²) by one generator seeded with ``seed``; restored on exit.

        The tensors are filled in module order (``named_parameters()``, as sway 0.1.0's
        ``as_null_adapter`` does, so equal seeds give sway's noise), or in parameter-name order with
        ``module_order=False``."""
        import torch

        generator = torch.Generator().manual_seed(int(seed))
        saved: list[tuple[Any, Any]] = []
        named = list(self.model.named_parameters())
        with self._entered(f"null:{seed}"):
            try:
                with torch.no_grad():
                    for name, param in named if module_order else sorted(named, key=lambda np_: np_[0]):
                        if "lora_A" in name or "lora_B" in name:
                            saved.append((param, param.detach().clone()))
                            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
                            param.copy_(noise.to(param.dtype) * init_scale)
                yield View(self, f"null:{seed}")
            finally:
                with torch.no_grad():
                    for param, original in saved:
                        param.copy_(original)

    def check_finite(self) -> None:
        """One forward pass in each view on a short input.

        Raises:
            NonFiniteLogitsError: either view's logits hold NaN or inf.
        """
        ids = list(self.tokenizer("Hello")["input_ids"])
        for enter in (self.as_base, self.as_finetuned):
            with enter() as view:
                view._logits([ids])  # past every cache: this model's logits, now

    @contextlib.contextmanager
    def _entered(self, name: str) -> Iterator[None]:
        if self._active is not None:
            raise RuntimeError(f"cannot enter the {name} view inside the {self._active} view")
        self._active = name
        try:
            yield
        finally:
            self._active = None


@dataclass(frozen=True)
class _StopWhenCancelled:
    """A stopping criterion of ``model.generate``: every sequence is done once ``cancel`` is set, so a cancelled
    evaluation stops within one decoding step, not after a whole batch of greedy answers (seconds on CPU)."""

    cancel: threading.Event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.cancel.is_set(), dtype=torch.bool, device=input_ids.device)


def _batches(lengths: Sequence[int], max_tokens: int, max_rows: int | None = None) -> list[list[int]]:
    """Indices into ``lengths`` grouped into batches, longest first, each padding to at most ``max_tokens``
    tokens (``batch size × longest length``) and of at most ``max_rows`` sequences (None: any number); a
    sequence longer than that is a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        fits = out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= max_tokens
        if fits and (max_rows is None or len(out[-1]) < max_rows):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _shared_context_batches(items: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int) -> list[list[int]]:
    """Indices into ``items`` (``(context, target)`` ids) grouped into the batches of :meth:`View.logprobs`: the
    widest contexts first and the items of one context together, each batch padding its two forward passes to at
    most ``max_tokens`` tokens in all (``distinct contexts × widest context + items × widest target``, less each
    target's last token, which predicts nothing) and its targets' pass to attend over at most
    :data:`MAX_BATCH_TOKENS` positions (``items × (widest context + widest target)``: each item's copy of its
    context's key/value cache); an item over that alone is a batch of its own.

    ``section_internalization`` scores up to 9 targets after each section's question (its own answer, 8 others'),
    so a many-section document's contexts run once each instead of once per target.
    """
    order = sorted(range(len(items)), key=lambda i: (-len(items[i][0]), tuple(items[i][0]), -len(items[i][1])))
    out: list[list[int]] = []
    contexts: set[tuple[int, ...]] = set()
    width = tail_width = 0
    for i in order:
        context, tail = tuple(items[i][0]), len(items[i][1]) - 1
        if out:
            rows, tails = len(out[-1]) + 1, max(tail_width, tail)
            passes = (len(contexts) + (context not in contexts)) * width + rows * tails
            if passes <= max_tokens and rows * (width + tails) <= MAX_BATCH_TOKENS:
                out[-1].append(i)
                contexts.add(context)
                tail_width = max(tail_width, tail)
                continue
        out.append([i])
        contexts, width, tail_width = {context}, len(context), tail
    return out


@dataclass
class View:
    """One side of a :class:`DifferentialBackend`; valid only inside the ``with`` that made it.

    The ``*_many`` methods run their inputs in batches: right-padded forwards of at most
    :attr:`DifferentialBackend.batch_tokens` padded tokens, left-padded generations of at most
    :data:`GENERATION_ROWS` sequences and :data:`GENERATION_LOGITS_BYTES` of logits; the single-input methods
    are batches of one. Batching changes float32 results only by summation order (≈ 1e-6 relative).
    """

    backend: DifferentialBackend
    name: str
    _cached: bool = field(init=False)

    def __post_init__(self) -> None:
        self._cached = self.name == "base"

    def next_token_dist(self, ids: Sequence[int], top_k: int = 256) -> TokenDist:
        """The ``top_k`` most likely next tokens after ``ids`` (all of them when ``top_k`` >= the
        vocabulary), natural-log probabilities in float64.

        Raises:
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        return self.next_token_dists([ids], top_k)[0]

    def next_token_dists(self, prompts: Sequence[Sequence[int]], top_k: int = 256) -> list[TokenDist]:
        """:meth:`next_token_dist` of each of ``prompts``, in order, in batched forward passes. On the base view
        the distributions are kept for the backend's life, and between evaluations in its
        :attr:`~DifferentialBackend.logprob_store` when it has one: only the prompts this base has not seen
        before run.

        Raises:
            ValueError: a prompt is empty.
            NonFiniteLogitsError: the logits hold NaN or inf.
            EvaluationCancelled: the backend's cancel event was set.
        """
        import torch

        keys = [("dist", tuple(p), top_k) for p in prompts]
        store = self.backend.logprob_store if self._cached else None
        named: dict[int, bytes] = {}  # the store's key of each prompt neither in memory nor in the store
        if store is not None:
            cache = self.backend._base_cache
            named = {i: dist_key(p, top_k) for i, p in enumerate(prompts) if keys[i] not in cache}
            found = store.load_dists(list(named.values()))
            cache.update((keys[i], found[key]) for i, key in named.items() if key in found)
            named = {i: key for i, key in named.items() if key not in found}

        def compute(i: int, logits: Any) -> TokenDist:
            logprobs = torch.log_softmax(logits[-1].double(), dim=-1)
            top = torch.topk(logprobs, min(top_k, logprobs.shape[0]))
            return TokenDist(
                top.indices.numpy().astype(np.int64), top.values.numpy().astype(np.float64), self.backend.vocab_size
            )

        dists = self._map(keys, [list(p) for p in prompts], compute)
        if store is not None:
            store.save_dists({key: dists[i] for i, key in named.items()})
        return dists

    def logprob(self, context: Sequence[int], target: Sequence[int]) -> float:
        """``Σ_t ln p(target[t] | context + target[:t])`` in nats (<= 0), summed in float64.

        Raises:
            ValueError: ``context`` or ``target`` is empty.
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        return self.logprobs([(context, target)])[0]

    def logprobs(self, items: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[float]:
        """:meth:`logprob` of each ``(context, target)`` of ``items``, in order, in batched forward passes.

        Items that share a context share its forward pass: the items of one context go in one batch
        (:func:`_shared_context_batches`), and each batch runs its distinct contexts once (right-padded, keeping
        their key/value cache), then every target after its own context's cache (position ids continuing the
        context, the context's padding masked out). On the base view the values
        are kept for the backend's life, and between evaluations in its
        :attr:`~DifferentialBackend.logprob_store` when it has one (written after each batch): only the items
        this base has not scored before run.

        Raises:
            ValueError: a context or target is empty.
            NonFiniteLogitsError: the logits hold NaN or inf.
            EvaluationCancelled: the backend's cancel event was set.
        """
        if any(not c or not t for c, t in items):
            raise ValueError("logprob needs a non-empty context and target")
        keys = [("logprob", tuple(c), tuple(t)) for c, t in items]
        cache = self.backend._base_cache if self._cached else {}
        results: dict[int, float] = {i: cache[k] for i, k in enumerate(keys) if k in cache}
        store = self.backend.logprob_store if self._cached else None
        named: dict[int, bytes] = {}  # the store's key of each item not in memory
        if store is not None:
            named = {i: item_key(items[i]) for i in range(len(items)) if i not in results}
            found = store.load(list(named.values()))
            results.update((i, found[key]) for i, key in named.items() if key in found)
        pending = [i for i in range(len(items)) if i not in results]
        for batch in _shared_context_batches([items[i] for i in pending], self.backend.batch_tokens):
            members = [pending[j] for j in batch]
            values = self._shared_context_logprobs([items[i] for i in members])
            results.update(zip(members, values, strict=True))
            if store is not None:
                store.save({named[i]: v for i, v in zip(members, values, strict=True)})
        if self._cached:
            cache.update((keys[i], results[i]) for i in range(len(items)))
        return [results[i] for i in range(len(items))]

    def _shared_context_logprobs(self, items: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[float]:
        """The log-likelihoods of one batch of ``(context, target)`` items: two forward passes."""
        import torch

        self.backend.check_cancelled()
        contexts = list(dict.fromkeys(tuple(c) for c, _ in items))
        which = [contexts.index(tuple(c)) for c, _ in items]
        pad = self.backend._pad_id
        device = self.backend.model.device
        width = max(map(len, contexts))
        ctx_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in contexts], device=device)
        ctx_ids = torch.tensor([list(c) + [pad] * (width - len(c)) for c in contexts], device=device)
        with torch.no_grad():
            out = self.backend.model(input_ids=ctx_ids, attention_mask=ctx_mask, use_cache=True)
        self.backend.forward_passes += 1
        firsts = [out.logits[g, len(contexts[g]) - 1] for g in which]  # (V,): predicts each target's first token
        tails = [list(t[:-1]) for _, t in items]  # what predicts each target's later tokens
        tail_width = max(map(len, tails))
        tail_logits = None
        if tail_width:
            past = getattr(out, self.backend.cache_keyword)
            past.reorder_cache(torch.tensor(which, device=device))  # one copy of its context's cache per item
            tail_ids = torch.tensor([t + [pad] * (tail_width - len(t)) for t in tails], device=device)
            tail_mask = torch.tensor([[1] * len(t) + [0] * (tail_width - len(t)) for t in tails], device=device)
            positions = torch.tensor([[len(contexts[g]) + j for j in range(tail_width)] for g in which], device=device)
            with torch.no_grad():
                tail_logits = self.backend.model(
                    input_ids=tail_ids,
                    attention_mask=torch.cat([ctx_mask[which], tail_mask], dim=1),
                    position_ids=positions,
                    **{self.backend.cache_keyword: past},
                ).logits
            self.backend.forward_passes += 1
        values = []
        for row, (_, target) in enumerate(items):
            rest = tail_logits[row, : len(target) - 1] if tail_logits is not None else firsts[row][None][:0]
            # (len(target), V), float32 on the CPU whatever device and dtype the model runs in
            logits = torch.cat([firsts[row].unsqueeze(0), rest], dim=0).float().cpu()
            bad = int((~torch.isfinite(logits)).sum())
            if bad:
                raise NonFiniteLogitsError(
                    f"the {self.name} view produced {bad} non-finite logit(s) scoring a continuation; "
                    "the adapter or the base model is broken"
                )
            logprobs = torch.log_softmax(logits.double(), dim=-1)
            values.append(float(logprobs.gather(1, torch.tensor(list(target)).unsqueeze(1)).sum()))
        return values

    def generate(self, ids: Sequence[int], max_new_tokens: int) -> list[int]:
        """Greedy continuation of ``ids``: at most ``max_new_tokens`` new ids, stopping at (and
        dropping) the model's end-of-sequence ids.

        Raises:
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        return self.generate_many([ids], [max_new_tokens])[0]

    def generate_many(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        *,
        negatives: Sequence[Sequence[int] | None] | None = None,
        context_alpha: float = 0.0,
    ) -> list[list[int]]:
        """:meth:`generate` of each prompt with its own token budget, in left-padded batches (HF
        ``generate`` derives the position ids from the attention mask). A prompt whose ``negatives`` entry is not
        None (the prompt without its retrieved examples) is answered as the endpoint answers a request under
        retrieved examples: with context-aware decoding against that entry when ``context_alpha`` is above 0
        (:func:`learnerd.ml.generate.guided_rows`: the negative prompts as the second half of the batch's rows), and
        ending with the ids that close its first fenced code block, or with the ids it may take to open one when it
        opens none (:func:`learnerd.ml.generate.cut_at_block`).

        Raises:
            ValueError: a prompt or a negative prompt is empty, or the budgets or negatives do not match the prompts.
            NonFiniteLogitsError: the logits of a decoding step hold NaN or inf.
            EvaluationCancelled: the backend's cancel event was set.
        """
        if negatives is None or all(n is None for n in negatives):
            return self.answers(prompts, max_new_tokens)[0]
        if len(negatives) != len(prompts):
            raise ValueError(f"{len(negatives)} negative prompts for {len(prompts)} prompts")
        plain = [i for i, n in enumerate(negatives) if n is None]
        guided = [i for i, n in enumerate(negatives) if n is not None]
        out: list[list[int]] = [[] for _ in prompts]
        for group, negative in ((plain, None), (guided, [negatives[i] for i in guided])):
            if group:
                found, _ = self._answers(
                    [prompts[i] for i in group], [max_new_tokens[i] for i in group], 1, negative, context_alpha
                )
                for i, ids in zip(group, found, strict=True):
                    out[i] = ids
        return out

    def answers(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        top_k: int = 256,
        *,
        persist: bool = False,
    ) -> Answers:
        """:meth:`generate_many`, and the ``top_k`` next-token distribution after each prompt that its first
        decoding step computes anyway — :meth:`next_token_dist`'s, up to float32 summation order (≈ 1e-6).

        ``persist`` (for a fixed pool of prompts, not a document's): on the base view of a backend with an
        :attr:`~DifferentialBackend.answer_store`, the answers are read from that store when this base, device
        and dtype answered exactly these prompts, budgets and ``top_k`` before, and stored after generating
        them otherwise; elsewhere it changes nothing.

        Raises:
            as :meth:`generate_many`.
        """
        if len(prompts) != len(max_new_tokens) or any(not p for p in prompts):
            raise ValueError("generate_many needs one non-empty prompt per token budget")
        store = self.backend.answer_store if persist and self.name == "base" and prompts else None
        if store is None:
            return self._answers(prompts, max_new_tokens, top_k)
        digest = store.key(self.backend.placement(), prompts, max_new_tokens, top_k)
        stored = store.load(digest)
        if stored is not None:
            return stored
        answers = self._answers(prompts, max_new_tokens, top_k)
        store.save(digest, answers)
        return answers

    def _answers(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        top_k: int,
        negatives: Sequence[Sequence[int] | None] | None = None,
        context_alpha: float = 0.0,
    ) -> Answers:
        """:meth:`answers` without the store; ``negatives`` (all given, or None) answer every prompt as quoted to the
        base, with context-aware decoding at ``context_alpha`` (:meth:`generate_many`)."""
        import torch

        out: list[list[int]] = [[] for _ in prompts]
        dists: dict[int, TokenDist] = {}
        unquoted = negatives if negatives is not None and context_alpha > 0 else None  # rows of their prompts' batch
        lengths = [len(p) + b for p, b in zip(prompts, max_new_tokens, strict=True)]
        if unquoted is not None:
            lengths = [n + len(unquoted[i] or ()) + max_new_tokens[i] for i, n in enumerate(lengths)]
        logits_per_row = 4 * self.backend.vocab_size * max(max_new_tokens, default=1)  # nothing to answer: no batch
        rows = max(1, min(GENERATION_ROWS, GENERATION_LOGITS_BYTES // logits_per_row) // (1 if unquoted is None else 2))
        device, pad = self.backend.model.device, self.backend._pad_id
        for batch in _batches(lengths, MAX_BATCH_TOKENS, rows):
            self.backend.check_cancelled()
            negative = [unquoted[i] or () for i in batch] if unquoted is not None else None
            decoding = greedy_inputs([prompts[i] for i in batch], negative, context_alpha, pad, device)
            width = decoding["input_ids"].shape[1]
            with torch.no_grad():
                gen = self.backend.model.generate(
                    max_new_tokens=max(max_new_tokens[i] for i in batch),
                    do_sample=False,
                    pad_token_id=pad,
                    return_dict_in_generate=True,
                    output_logits=True,
                    stopping_criteria=[
                        _StopWhenCancelled(self.backend.cancel),
                        *([BlockEnds(self.backend.tokenizer, width, self.backend.eos_ids)] if negatives else []),
                    ],
                    **decoding,
                )
            self.backend.check_cancelled()  # a generation the cancel event cut short is discarded
            self.backend.forward_passes += len(gen.logits)
            for step, logits in enumerate(gen.logits):
                bad = int((~torch.isfinite(logits)).sum())
                if bad:
                    raise NonFiniteLogitsError(
                        f"the {self.name} view produced {bad} non-finite logit(s) at decoding step {step}; "
                        "the adapter or the base model is broken"
                    )
            first = torch.log_softmax(gen.logits[0][: len(batch)].double(), dim=-1).cpu()  # (batch, V): prompts' rows
            top = torch.topk(first, min(top_k, first.shape[-1]))
            for row, i in enumerate(batch):
                new = gen.sequences[row, width:].cpu().tolist()[: max_new_tokens[i]]
                out[i] = until_eos(new, self.backend.eos_ids)
                if negatives is not None:
                    out[i] = out[i][: cut_at_block(self.backend.tokenizer, out[i])[0]]
                ids, values = top.indices[row].numpy(), top.values[row].numpy()
                dists[i] = TokenDist(ids.astype(np.int64), values.astype(np.float64), self.backend.vocab_size)
        return out, [dists[i] for i in range(len(prompts))]

    def choose(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        commands: Sequence[Sequence[str]],
        margin: float,
        max_new_tokens: Sequence[int],
        *,
        negatives: Sequence[Sequence[int] | None] | None = None,
        context_alpha: float = 0.0,
    ) -> list[list[int]]:
        """The token ids of each answer as the endpoint gives it: ``answers`` (:meth:`generate_many` of ``prompts``
        with these ``max_new_tokens``, ``negatives`` and ``context_alpha``), each carrying the quoted command of
        ``commands`` (its quoted examples', nearest first) this view chooses at ``margin`` nats per token
        (:func:`learnerd.ml.choice.choose_command`), re-encoded when it does. Whether an answer ended with an EOS id
        is read from its length against its budget (:func:`learnerd.ml.generate.ended_with_eos`).

        Raises:
            ValueError: the lists differ in length, or as :func:`~learnerd.ml.choice.choose_command`.
        """
        negatives = negatives if negatives is not None else [None] * len(prompts)
        if not len(prompts) == len(answers) == len(commands) == len(max_new_tokens) == len(negatives):
            raise ValueError("choose needs one answer, command list, budget and negative per prompt")
        tokenizer, eos = self.backend.tokenizer, min(self.backend.eos_ids, default=None)
        out = []
        for prompt, ids, quoted, budget, negative in zip(
            prompts, answers, commands, max_new_tokens, negatives, strict=True
        ):
            text = tokenizer.decode(ids, skip_special_tokens=True)
            ended = ended_with_eos(text, len(ids), budget, at_block=negative is not None)
            choice = choose_command(
                self.backend.model,
                tokenizer,
                prompt,
                text,
                quoted,
                margin,
                ended=ended,
                eos_id=eos,
                negative_ids=negative,
                alpha=context_alpha if negative is not None else 0.0,
            )
            same = choice.example is None
            out.append(list(ids) if same else list(tokenizer(choice.text, add_special_tokens=False)["input_ids"]))
        return out

    def _map(
        self, keys: Sequence[tuple[Any, ...]], sequences: Sequence[list[int]], compute: Callable[[int, Any], Any]
    ) -> list[Any]:
        """``compute(i, logits of sequence i's real tokens, float32 (T_i, V))`` for each sequence, through
        the base view's cache; the uncached ones in batched forward passes."""
        cache = self.backend._base_cache if self._cached else {}
        results: dict[int, Any] = {i: cache[k] for i, k in enumerate(keys) if k in cache}
        pending = [i for i in range(len(keys)) if i not in results]
        for batch in _batches([len(sequences[i]) for i in pending], self.backend.batch_tokens):
            members = [pending[j] for j in batch]
            for i, logits in zip(members, self._logits([sequences[i] for i in members]), strict=True):
                results[i] = compute(i, logits)
                if self._cached:
                    cache[keys[i]] = results[i]
        return [results[i] for i in range(len(keys))]

    def _logits(self, sequences: Sequence[list[int]]) -> list[Any]:
        """One right-padded forward pass; each sequence's logits over its own tokens, float32 ``(T_i, V)``."""
        import torch

        if any(not s for s in sequences):
            raise ValueError("empty input")
        self.backend.check_cancelled()
        width = max(len(s) for s in sequences)
        pad = self.backend._pad_id
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences])
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
        with torch.no_grad():
            device = self.backend.model.device
            logits = self.backend.model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits
            logits = logits.float().cpu()  # float32 on the CPU, whatever device and dtype the model runs in
        self.backend.forward_passes += 1
        out = [logits[row, : len(s)] for row, s in enumerate(sequences)]
        bad = sum(int((~torch.isfinite(x)).sum()) for x in out)
        if bad:
            raise NonFiniteLogitsError(
                f"the {self.name} view produced {bad} non-finite logit(s) over {sum(map(len, sequences))} input "
                "tokens; the adapter or the base model is broken"
            )
        return out
