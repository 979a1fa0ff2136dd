"""The served-model manager in process, on the built-in tiny model: ``[serve] steering`` applies the
document's best ``learnerd evolve`` deltas; a full queue refuses; an admission holds
its place until submitted or released; a prompt surely longer than the context is refused from its length;
a version is bound at admission; a job runs on the version its request was prepared for."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.api.settings import ServeConfig
from learnerd.daemon import wiring
from learnerd.daemon.config import Config
from learnerd.ml.base_model import load_model_directory, resolve_base_model
from learnerd.ml.rows import ChatMessage
from learnerd.ml.serving import (
    CURRENT,
    Delta,
    PromptTooLong,
    QueueFull,
    SamplingParams,
    ServedModel,
    ServedModels,
    longest_token_chars,
    min_tokens,
)
from learnerd.steering.clusters import eos_token_ids
from learnerd.store.adapters import AdapterStore
from tests.support.steering import write_eos_split_deltas
from tests.support.tied_model import commit_noise_adapter

pytestmark = pytest.mark.anyio

DOC_KEY = "01J0SERVE00000000000000000"
MODEL = ServedModel("notes", "learnerd/tiny-llama", doc_key=DOC_KEY)
GREEDY = SamplingParams(max_tokens=8, temperature=0.0)
QUESTION = [ChatMessage("user", "What is the capital of France?")]


def config(tmp_path: Path, models_dir: Path, **serve) -> Config:
    cfg = Config(state_dir=tmp_path / "state", serve=ServeConfig(**serve))
    cfg.state_dir.mkdir(parents=True)
    (cfg.state_dir / "models").symlink_to(models_dir)
    return cfg


async def answer(served, model=MODEL, params=GREEDY, version=CURRENT):
    job = served.submit(model, QUESTION, params, version=version)
    text, done = [], None
    async for event in job.events():
        if isinstance(event, Delta):
            text.append(event.text)
        else:
            done = event
    return "".join(text), done


def end_of_sequence_deltas(cfg: Config, tiny_model_dir: Path) -> Path:
    """A steering file whose only non-zero delta makes EOS certain (cluster 0 = the EOS ids, +50 logits)."""
    model, tokenizer = load_model_directory(tiny_model_dir)
    eos = eos_token_ids(tokenizer, model.generation_config)
    return write_eos_split_deltas(cfg.layout.steering_dir / "runs" / DOC_KEY, tokenizer, eos, {0: 50.0, 1: 0.0, 2: 0.0})


async def test_steering_applies_the_documents_best_deltas(tmp_path: Path, models_dir: Path, tiny_model_dir: Path):
    cfg = config(tmp_path, models_dir, steering=True)
    served = wiring.served_models(cfg)
    try:
        plain, done = await answer(served)
        assert done.completion_tokens > 0 and plain  # no steering file yet: the tiny model babbles
        end_of_sequence_deltas(cfg, tiny_model_dir)
        steered, done = await answer(served)
        assert (steered, done.completion_tokens, done.finish_reason) == ("", 0, "stop")
        base, done = await answer(served, ServedModel("learnerd/tiny-llama", "learnerd/tiny-llama"))
        assert base == plain  # a base model has no document, so no steering
    finally:
        served.close()


async def test_a_full_queue_refuses_with_a_retry_hint(tmp_path: Path, models_dir: Path):
    served = wiring.served_models(config(tmp_path, models_dir, queue_size=2))
    try:
        jobs = [served.submit(MODEL, QUESTION, GREEDY) for _ in range(2)]
        with pytest.raises(QueueFull) as full:
            served.submit(MODEL, QUESTION, GREEDY)
        assert full.value.retry_after_s >= 1
        for job in jobs:
            async for _ in job.events():
                pass
        assert served.pending == 0
        text, _ = await answer(served)  # room again
        assert text
    finally:
        served.close()


async def test_an_admission_holds_a_place_until_it_is_submitted_or_released(tmp_path: Path, models_dir: Path):
    served = wiring.served_models(config(tmp_path, models_dir, queue_size=1))
    try:
        admission = served.admit()
        with pytest.raises(QueueFull):
            served.admit()
        admission.release()
        admission.release()  # idempotent
        assert served.pending == 0
        job = served.submit(MODEL, QUESTION, GREEDY, served.admit())
        with pytest.raises(QueueFull):
            served.admit()
        async for _ in job.events():
            pass
        assert served.pending == 0
    finally:
        served.close()


async def test_a_prompt_surely_longer_than_the_context_is_refused_from_its_length(
    tmp_path: Path, models_dir: Path, tiny_model_dir: Path
):
    """:func:`~learnerd.ml.serving.min_tokens` never exceeds the tokens a text really is (whitespace, Unicode
    and special-token text included), and refuses a megabyte before the model tokenizes it."""
    _, tokenizer = load_model_directory(tiny_model_dir)
    longest = longest_token_chars(tokenizer)
    for text in ("ls -la", "x" * 5000, " \t\n" * 300 + "é" * 700, "<|im_start|>system" * 50, "e\u0301" * 400):
        assert min_tokens(text, longest) <= len(tokenizer(text, add_special_tokens=False)["input_ids"]), text[:20]
    served = wiring.served_models(config(tmp_path, models_dir))
    try:
        huge = [ChatMessage("user", "list pods " * 100_000)]
        served.check_prompt(MODEL, huge)  # not loaded yet: the job checks the rendered prompt
        await answer(served)
        with pytest.raises(PromptTooLong, match="the prompt is at least"):
            served.check_prompt(MODEL, huge)
        served.check_prompt(MODEL, QUESTION)
    finally:
        served.close()


async def test_generation_runs_on_the_serve_thread_count(tmp_path: Path, models_dir: Path):
    """``[serve] num_threads`` (default: the free cores minus one) is the torch thread count during generation,
    read by a logits processor that runs inside ``generate``."""
    from learnerd.ml.threads import usable_cores

    default = wiring.served_models(config(tmp_path / "a", models_dir))
    assert default.num_threads == 0 and 1 <= default.threads() <= max(1, usable_cores() - 1)
    default.close()
    seen: list[int] = []

    def record(input_ids, scores):
        import torch

        seen.append(torch.get_num_threads())
        return scores

    served = wiring.served_models(config(tmp_path / "b", models_dir, num_threads=3))
    served._steering = lambda doc_key, tokenizer: record
    try:
        text, _ = await answer(served)
        assert text and seen and set(seen) == {3}
    finally:
        served.close()


async def test_a_job_runs_on_the_version_its_request_was_prepared_for(tmp_path: Path, models_dir: Path):
    """The endpoint reads the current version once, holds back that version's learned examples from the
    retrieval block, and submits the job with it: a version promoted in between serves the next request,
    never this one's block."""
    ref = resolve_base_model(MODEL.base_model, cache_dir=models_dir)
    store = AdapterStore(tmp_path / "adapters")
    v1 = commit_noise_adapter(store, DOC_KEY, ref, scale=0.5)
    served = ServedModels(store, models_dir, num_threads=1)
    try:
        prepared = served.current_version(MODEL)
        assert prepared == v1
        v2 = commit_noise_adapter(store, DOC_KEY, ref, scale=1.0)
        served.adapter_promoted(v2)  # between preparing the request and submitting its job
        _, pinned = await answer(served, version=prepared)
        _, current = await answer(served)
        _, base = await answer(served, version=None)
        assert (pinned.adapter, current.adapter, base.adapter) == ("v0001", "v0002", None)
    finally:
        served.close()
