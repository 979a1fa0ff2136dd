"""A document's routing threshold under the real MiniLM embedder (learnerd.ml.router): it sends every prompt of
the general replay pool to the base and every templated rewrite of a learned question to the adapter, it is the
same at every calibration, a training cycle records it in the version's manifest, and a version without one
routes with the default."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest

from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.router import DEFAULT_THRESHOLD, TEMPLATES, calibrate, document_questions, text_router
from learnerd.ml.rows import document_rows
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.manifest import read_manifest
from learnerd.training.config import check_trainable
from learnerd.training.cycle import train_cycle
from learnerd.training.ingredients.replay import replay_prompts
from tests.conftest import REPO_ROOT
from tests.support.documents import qa_document

pytestmark = pytest.mark.usefixtures("one_torch_thread")
COMMANDS = [
    ("Restart the api deployment in dev", "kubectl rollout restart deployment/api -n dev"),
    ("List the pods in the dev namespace", "kubectl get pods -n dev"),
    ("Tag the release v1.2 and push the tag", "git tag v1.2 && git push origin v1.2"),
]


class Fresh:
    """The session's MiniLM under a new identity, so nothing it embedded before is reused
    (:func:`learnerd.ml.router.embed_memo` keeps embeddings per embedder)."""

    def __init__(self, embedder) -> None:
        self._embedder, self.name, self.dim, self.calls = embedder, embedder.name, embedder.dim, 0
        self.embedded = 0  # texts embedded

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded += len(texts)
        return self._embedder.embed(texts)


def test_the_threshold_sends_the_general_pool_to_the_base_and_rewrites_of_a_learned_question_to_the_adapter(minilm):
    questions = document_questions(document_rows(read_document(REPO_ROOT / "examples" / "commands.dlm")))
    calibration = calibrate(questions, minilm, replay_prompts())
    assert calibration is not None and calibration.questions == len(questions) == 20
    vectors = minilm.embed(questions)
    general = (minilm.embed(list(replay_prompts())) @ vectors.T).max(axis=1)
    assert general.max() < calibration.threshold, "a general prompt would reach the adapter"
    rewrites = minilm.embed([t.format(q=q) for q in questions for t in TEMPLATES]).reshape(len(questions), -1, 384)
    own = np.einsum("qd,qtd->qt", vectors, rewrites)
    assert own.min() >= calibration.threshold - 1e-4, "a rewrite of a learned question would leave the adapter"
    fresh = Fresh(minilm)
    assert calibrate(questions, fresh, replay_prompts()) == calibration  # deterministic, whatever was embedded before
    embedded = fresh.embedded
    assert embedded == len(questions) * (1 + len(TEMPLATES)) + len(set(replay_prompts()))
    assert calibrate(questions, fresh, replay_prompts()) == calibration and fresh.embedded == embedded, (
        "each text is embedded once"
    )
    assert calibrate([], minilm, replay_prompts()) is None


def test_a_cycle_records_the_threshold_in_the_manifest_and_a_version_without_one_routes_with_the_default(
    tmp_path: Path, models_dir: Path, tiny_model_dir: Path, minilm
):
    doc = qa_document(tmp_path / "commands.dlm", COMMANDS, training={"learning_rate": 0.01, "num_epochs": 1})
    document = read_document(doc)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=models_dir)
    store, rows, key = AdapterStore(tmp_path / "adapters"), document_rows(document), document.frontmatter.dlm_id
    config = check_trainable(document.frontmatter.training)

    async def cycle(embedder):
        return await train_cycle(store, key, base, rows, config, num_threads=1, fresh=True, routing_embedder=embedder)

    routed = anyio.run(cycle, minilm).version
    recorded = read_manifest(routed.path).routing
    assert recorded == calibrate([q for q, _ in COMMANDS], Fresh(minilm), replay_prompts()).to_dict()
    assert recorded["embedder"] == "all-MiniLM-L6-v2" and 0 < recorded["threshold"] <= 1
    described = text_router(document, routed, minilm).describe()
    assert described["threshold"] == recorded["threshold"] and described["recorded"] and described["questions"] == 3

    unrouted = anyio.run(cycle, None).version  # trained with no embedder at hand: nothing recorded
    assert read_manifest(unrouted.path).routing is None
    router = text_router(document, unrouted, minilm)
    assert router.describe()["threshold"] == DEFAULT_THRESHOLD and not router.describe()["recorded"]
    far, learned = router(["What is the capital of France?", COMMANDS[0][0]])
    assert (far.routed, learned.routed) == ("base", "adapter") and learned.similarity == pytest.approx(1.0)
