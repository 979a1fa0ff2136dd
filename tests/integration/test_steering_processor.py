"""The steering logits processor on the built-in tiny model with an adapter that learned 20 Q/A pairs:
it changes generation exactly as its deltas say, and a steering file loads only for its own tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.generate import greedy_reply
from learnerd.ml.loader import load_adapter
from learnerd.steering.clusters import eos_token_ids, load_or_build_clusters
from learnerd.steering.processor import (
    ClusterBiasProcessor,
    SteeringError,
    load_steering,
    processor_for,
    write_steering,
)
from learnerd.store.adapters import AdapterStore
from tests.qa_pairs import QA_PAIRS
from tests.support.memorised import memorised
from tests.support.steering import one_thread

MAX_NEW = 24
PAIRS = QA_PAIRS[:6]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def steered(tmp_path_factory, minilm):
    """The adapted tiny model, its tokenizer and its vocabulary clusters."""
    with one_thread():
        trained = memorised()
        base_dir = next((trained.state_dir / "models").glob("tiny-llama-*"))
        model, tokenizer = load_model_directory(base_dir)
        peft_model = load_adapter(model, AdapterStore(trained.state_dir / "adapters").current(trained.doc_key))
        clusters = load_or_build_clusters(
            tokenizer,
            embedder_name=minilm.name,
            make_embedder=lambda: minilm,
            k=10,
            seed=0,
            eos_ids=eos_token_ids(tokenizer, model.generation_config),
            cache_root=tmp_path_factory.mktemp("clusters"),
        )
    return peft_model, tokenizer, clusters


def _replies(steered, deltas=None):
    model, tokenizer, clusters = steered
    processors = None
    if deltas is not None:
        from transformers import LogitsProcessorList

        full = dict.fromkeys(clusters.cluster_ids, 0.0) | deltas
        processors = LogitsProcessorList([processor_for(clusters, full)])
    return [greedy_reply(model, tokenizer, q, max_new_tokens=MAX_NEW, logits_processor=processors) for q, _ in PAIRS]


def test_zero_deltas_give_exactly_the_unsteered_tokens(steered):
    plain, zero = _replies(steered), _replies(steered, {})
    assert [r.token_ids for r in zero] == [r.token_ids for r in plain]
    assert [r.text for r in zero] == [r.text for r in plain]
    assert sum(r.text == a for r, (_, a) in zip(plain, PAIRS, strict=True)) >= 5  # the adapter answers
    assert all(0 < len(r.token_ids) < MAX_NEW for r in plain)  # ... and stops by itself


def test_large_positive_eos_delta_ends_generation_at_once(steered):
    assert all(r.token_ids == () and r.text == "" for r in _replies(steered, {0: 50.0}))


def test_large_negative_eos_delta_never_ends_early(steered):
    assert all(len(r.token_ids) == MAX_NEW for r in _replies(steered, {0: -50.0}))


def test_a_large_delta_on_the_number_cluster_makes_every_token_a_number(steered):
    _, _, clusters = steered
    replies = _replies(steered, {1: 50.0, 0: -50.0})
    assert all(all(clusters.token_clusters[t] == 1 for t in r.token_ids) for r in replies)
    assert all(len(r.token_ids) == MAX_NEW for r in replies)


def test_the_bias_is_the_cluster_delta_on_any_dtype_and_padded_vocabulary():
    clusters = np.array([0, 1, 2, 2, 1, 3], dtype=np.int32)
    deltas = [5.0, -1.5, 0.25, 0.0]
    processor = ClusterBiasProcessor(clusters, deltas)
    scores = torch.randn(2, 8)  # two padding logits past the 6-token vocabulary
    out = processor(torch.zeros(2, 1, dtype=torch.long), scores)
    expected = scores.clone()
    expected[:, :6] += torch.tensor([deltas[c] for c in clusters])
    assert torch.equal(out, expected)
    half = processor(None, scores.to(torch.bfloat16))
    assert half.dtype == torch.bfloat16
    assert torch.equal(processor(None, scores), processor(None, scores))  # the cached bias is reused
    with pytest.raises(SteeringError, match="fewer than the 6-token cluster map"):
        processor(None, torch.zeros(1, 5))
    with pytest.raises(SteeringError, match=r"outside 0\.\.2"):
        ClusterBiasProcessor(clusters, deltas[:3])


def test_steering_file_round_trip_and_refusals(steered, tmp_path):
    model, tokenizer, clusters = steered
    deltas = {c: 0.5 * c - 1 for c in clusters.cluster_ids}
    path = tmp_path / "deltas.json"
    write_steering(path, deltas, clusters, evaluation={"composite": 0.5})
    raw = json.loads(path.read_text())
    assert raw["format"] == "learnerd-steering" and raw["tokenizer_identity"] == clusters.tokenizer_identity
    assert raw["deltas"] == {str(c): d for c, d in deltas.items()} and raw["clusters"]["sha256"] == clusters.map_sha256
    loaded = load_steering(path, tokenizer)
    scores = torch.zeros(1, len(tokenizer))
    assert torch.equal(loaded(None, scores), processor_for(clusters, deltas)(None, scores))

    _, other = load_model_directory(model.base_model.model.name_or_path)
    other.add_tokens(["<|steering-test|>"])  # another vocabulary: another tokenizer identity
    with pytest.raises(SteeringError, match=r"made for tokenizer vocab-262-.*this model's tokenizer is vocab-263-"):
        load_steering(path, other)
    raw["clusters"]["sha256"] = "0" * 64
    path.write_text(json.dumps(raw))
    with pytest.raises(SteeringError, match="the cluster map changed"):
        load_steering(path, tokenizer)
