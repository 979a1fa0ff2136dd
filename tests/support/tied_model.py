"""Models for the loader tests (and ``benchmarks/bench_loader.py``): the built-in tiny Llama with tied embeddings,
as SmolLM2's are, adapters committed without training, and a served load beside an evaluation's load.

transformers never materialises a tied weight (``lm_head.weight`` of a model with ``tie_word_embeddings``):
its load ties it to ``model.embed_tokens.weight`` as the last step. The built-in tiny model is untied, so a
load that skips that step goes unnoticed on it; these tests load the tied copy instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from benchmarks.bench_eval import make_adapter
from learnerd.eval.backend import DifferentialBackend
from learnerd.ml.base_model import BaseModelRef, load_model_directory
from learnerd.ml.loader import loading
from learnerd.ml.rows import ChatMessage
from learnerd.ml.serving import Delta, SamplingParams, ServedModel, ServedModels
from learnerd.store.adapters import AdapterMetadata, AdapterStore, AdapterVersion
from learnerd.store.manifest import Manifest, SectionOrigin, write_manifest


def build_tied_tiny_model(tiny_model_dir: Path, target: Path) -> Path:
    """The tiny model's weights with ``lm_head`` tied to ``embed_tokens``, saved at ``target`` (a local model
    directory, usable as a ``base_model``). Returns ``target``."""
    from transformers import LlamaForCausalLM

    model, tokenizer = load_model_directory(tiny_model_dir)
    model.config.tie_word_embeddings = True
    with loading():
        tied = LlamaForCausalLM(model.config)
    tied.load_state_dict({k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}, strict=False)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    tied.generation_config = model.generation_config
    tied.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def commit_noise_adapter(
    store: AdapterStore,
    doc_key: str,
    base: BaseModelRef,
    *,
    scale: float = 0.5,
    promote: bool = True,
    learned: Sequence[str] = (),
    hyperparameters: dict[str, Any] | None = None,
) -> AdapterVersion:
    """Commit an adapter of ``base`` written by :func:`benchmarks.bench_eval.make_adapter` as the next
    version of ``doc_key``, promoted unless ``promote`` is False; with ``learned`` (example ids) its manifest
    says it embodies those examples, one section each; ``hyperparameters`` go into its metadata."""
    with store.stage(doc_key) as staging:
        make_adapter(base.path, staging.path, scale)
        meta = AdapterMetadata(
            base.name, base.identity, (), (), (), None, 0, 0.0, 0.0, 0, 42, hyperparameters or {}, {}, "2026-01-01"
        )
        if learned:
            sections = tuple(SectionOrigin(f"s{i}", 1, example_id=e) for i, e in enumerate(learned))
            manifest = Manifest(
                doc_key, "2026-01-01", "fresh", "test", base.name, None, None, 0, 0.0, 0.0, (), sections, (), (), ()
            )
            write_manifest(staging.path, manifest)
        version = store.commit(staging, meta)
    if promote:
        store.promote(version)
    return version


QUESTION = [ChatMessage("user", "What is the capital of France?")]
GREEDY = SamplingParams(max_tokens=8, temperature=0.0)


async def answer(served: ServedModels, model: ServedModel) -> str:
    """``model``'s greedy answer to :data:`QUESTION` (8 tokens) from ``served``."""
    job = served.submit(model, QUESTION, GREEDY)
    return "".join([event.text async for event in job.events() if isinstance(event, Delta)])


async def load_both_at_once(
    store: AdapterStore, models_dir: Path, model: ServedModel, ref: BaseModelRef, version: AdapterVersion
) -> tuple[ServedModels, DifferentialBackend]:
    """A cold served-model manager warming ``model`` (base and adapter, in its worker thread, one torch thread)
    while an evaluation's backend loads the same base and adapter in another thread."""
    served = ServedModels(store, models_dir, num_threads=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(served.warm, model)
        backend = await anyio.to_thread.run_sync(DifferentialBackend.load, ref, version)
    return served, backend
