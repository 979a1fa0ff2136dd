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
* :meth:`View.generate` — greedy decoding until an end-of-sequence id.

Every forward pass checks that the logits are finite: a NaN or inf raises :class:`NonFiniteLogitsError`
naming the view, so no probe ever computes on garbage. Log-softmax runs in float64. Results of the base
view are cached per input (the base never changes), which makes null-adapter calibration cost only the
other side's forward passes. Not thread-safe: one evaluation at a time per backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from learnerd.ml.base_model import BaseModelRef, load_model_directory
from learnerd.ml.device import Placement
from learnerd.ml.divergence import TokenDist
from learnerd.store.adapters import AdapterVersion, load_adapter

NULL_INIT_SCALE = 0.02
"""Standard deviation of a null adapter's ``lora_A`` / ``lora_B`` entries (sway's ``init_scale``)."""


class NonFiniteLogitsError(RuntimeError):
    """A view produced NaN or inf logits (a broken adapter or base): nothing can be measured on it."""


class DifferentialBackend:
    """Base and fine-tuned views over one ``peft.PeftModel``.

    Args:
        model: a ``PeftModel`` (eval mode) whose adapter is the one under evaluation.
        tokenizer: its tokenizer.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        generation = getattr(model, "generation_config", None)
        eos = getattr(generation, "eos_token_id", None) if generation is not None else None
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids: frozenset[int] = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._active: str | None = None
        self._base_cache: dict[tuple[Any, ...], Any] = {}
        self.forward_passes = 0

    @classmethod
    def load(
        cls, base: BaseModelRef, version: AdapterVersion, placement: Placement | None = None
    ) -> DifferentialBackend:
        """Load ``base`` (offline; on ``placement``, default CPU float32) and attach ``version``'s adapter.

        Raises:
            BaseModelError: the base cannot be loaded.
            OSError / ValueError: peft cannot load the adapter directory.
        """
        model, tokenizer = load_model_directory(base.path, name=base.name, placement=placement)
        return cls(load_adapter(model, version), tokenizer)

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
    def as_null_adapter(self, seed: int, init_scale: float = NULL_INIT_SCALE) -> Iterator[View]:
        """A view through a random-noise adapter of the trained one's shape: every ``lora_A`` / ``lora_B``
        entry drawn from N(0, ``init_scale``²) by a generator seeded with ``seed``; restored on exit."""
        import torch

        generator = torch.Generator().manual_seed(int(seed))
        saved: list[tuple[Any, Any]] = []
        with self._entered(f"null:{seed}"):
            try:
                with torch.no_grad():
                    for name, param in sorted(self.model.named_parameters()):
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
                view.next_token_dist(ids, top_k=8)

    @contextlib.contextmanager
    def _entered(self, name: str) -> Iterator[None]:
        if self._active is not None:
            raise RuntimeError(f"cannot enter the {name} view inside the {self._active} view")
        self._active = name
        try:
            yield
        finally:
            self._active = None


@dataclass
class View:
    """One side of a :class:`DifferentialBackend`; valid only inside the ``with`` that made it."""

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
        key = ("dist", tuple(ids), top_k)
        if self._cached and key in self.backend._base_cache:
            return self.backend._base_cache[key]
        import torch

        logprobs = torch.log_softmax(self._logits(ids)[-1].double(), dim=-1)
        k = min(top_k, logprobs.shape[0])
        top = torch.topk(logprobs, k)
        dist = TokenDist(
            top.indices.numpy().astype(np.int64), top.values.numpy().astype(np.float64), self.backend.vocab_size
        )
        if self._cached:
            self.backend._base_cache[key] = dist
        return dist

    def logprob(self, context: Sequence[int], target: Sequence[int]) -> float:
        """``Σ_t ln p(target[t] | context + target[:t])`` in nats (<= 0).

        Raises:
            ValueError: ``context`` or ``target`` is empty.
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        if not context or not target:
            raise ValueError("logprob needs a non-empty context and target")
        key = ("logprob", tuple(context), tuple(target))
        if self._cached and key in self.backend._base_cache:
            return self.backend._base_cache[key]
        import torch

        logits = self._logits([*context, *target])[len(context) - 1 : -1]
        logprobs = torch.log_softmax(logits.double(), dim=-1)
        value = float(logprobs.gather(1, torch.tensor(list(target)).unsqueeze(1)).sum())
        if self._cached:
            self.backend._base_cache[key] = value
        return value

    def generate(self, ids: Sequence[int], max_new_tokens: int) -> list[int]:
        """Greedy continuation of ``ids``: at most ``max_new_tokens`` new ids, stopping at (and
        dropping) the model's end-of-sequence ids.

        Raises:
            NonFiniteLogitsError: the logits of the prompt hold NaN or inf.
        """
        import torch

        self._logits(ids)  # the finite check; generate() itself would argmax over NaN silently
        input_ids = torch.tensor([list(ids)], device=self.backend.model.device)
        with torch.no_grad():
            out = self.backend.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=self.backend._pad_id,
            )
        new = out[0, len(ids) :].tolist()
        for i, token in enumerate(new):
            if token in self.backend.eos_ids:
                return new[:i]
        return new

    def _logits(self, ids: Sequence[int]) -> Any:
        """float32 logits ``(len(ids), vocab)`` on the CPU, whatever device the model runs on."""
        import torch

        if not ids:
            raise ValueError("empty input")
        with torch.no_grad():
            input_ids = torch.tensor([list(ids)], device=self.backend.model.device)
            logits = self.backend.model(input_ids=input_ids).logits[0].float().cpu()
        self.backend.forward_passes += 1
        bad = int((~torch.isfinite(logits)).sum())
        if bad:
            raise NonFiniteLogitsError(
                f"the {self.name} view produced {bad} non-finite logit(s) over {len(ids)} input tokens; "
                "the adapter or the base model is broken"
            )
        return logits
