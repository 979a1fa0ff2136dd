"""Vocabulary clusters on real tokenizers with the real MiniLM embedder: the built-in tiny model's
byte-level tokenizer, and a WordPiece tokenizer of a sample of MiniLM's own vocabulary (every
:data:`SAMPLE_EVERY`-th of its 30,522 tokens and the ones the test names); SmolLM2's 49,152-token byte-level BPE
vocabulary as the clusters read it. ``benchmarks/bench_steering_clusters.py`` clusters MiniLM's whole vocabulary
(about 1.5 minutes of a shared 2-core machine), ``benchmarks/bench_steering.py`` SmolLM2's (``learnerd evolve``)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.steering.clusters import (
    DESCRIPTIONS_FILE,
    MAP_FILE,
    ClusterError,
    eos_token_ids,
    load_clusters,
    load_or_build_clusters,
    tokenizer_identity,
)
from tests.support.steering import one_thread

K = 10
SAMPLE_EVERY = 16
WORDS = ("paris", "the", "##ing", "[CLS]", "(", "3rd")
SYMBOLS = ("$", "%", "+", "=", "##5", "½")


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny_clusters(tiny, minilm, tmp_path_factory):
    model, tokenizer = tiny
    calls = []

    def make():
        calls.append(1)
        return minilm

    with one_thread():
        clusters = load_or_build_clusters(
            tokenizer,
            embedder_name=minilm.name,
            make_embedder=make,
            k=K,
            seed=0,
            eos_ids=eos_token_ids(tokenizer, model.generation_config),
            cache_root=tmp_path_factory.mktemp("clusters"),
        )
    assert calls == [1]
    return clusters


@pytest.fixture(scope="module")
def minilm_sample(minilm, tmp_path_factory):
    """A WordPiece tokenizer (``BertTokenizer``, lower-casing as MiniLM's) of every :data:`SAMPLE_EVERY`-th token
    of MiniLM's vocabulary, its special tokens, :data:`WORDS` and :data:`SYMBOLS`, in MiniLM's id order."""
    from transformers import BertTokenizer

    vocab = minilm.tokenizer.get_vocab()
    named = {vocab[t] for t in (*WORDS, *SYMBOLS, *minilm.tokenizer.all_special_tokens)}
    kept = sorted(named | set(range(0, len(vocab), SAMPLE_EVERY)))
    by_id = {i: t for t, i in vocab.items()}
    vocab_file = tmp_path_factory.mktemp("minilm-sample") / "vocab.txt"
    vocab_file.write_text("".join(by_id[i] + "\n" for i in kept), encoding="utf-8")
    return BertTokenizer(str(vocab_file), do_lower_case=True)


@pytest.fixture(scope="module")
def minilm_clusters(minilm, minilm_sample, tmp_path_factory):
    """:func:`minilm_sample`'s vocabulary clustered with MiniLM, on one torch thread."""
    with one_thread():
        return load_or_build_clusters(
            minilm_sample,
            embedder_name=minilm.name,
            make_embedder=lambda: minilm,
            k=K,
            seed=0,
            eos_ids=eos_token_ids(minilm_sample),
            cache_root=tmp_path_factory.mktemp("minilm-clusters"),
        )


def _check_partition(clusters, tokenizer, eos_ids, digit_ids):
    assignment = clusters.token_clusters
    assert assignment.shape == (len(tokenizer),) and assignment.dtype == np.int32
    assert set(np.flatnonzero(assignment == 0).tolist()) == set(eos_ids)
    assert digit_ids and all(assignment[i] == 1 for i in digit_ids)
    others = np.setdiff1d(np.arange(len(tokenizer)), np.flatnonzero(assignment <= 1))
    assert np.all((assignment[others] >= 2) & (assignment[others] <= K + 1))
    assert set(np.unique(assignment).tolist()) == set(range(K + 2))  # k-means used every cluster
    sizes = [c["size"] for c in clusters.descriptions["clusters"]]
    assert [c["id"] for c in clusters.descriptions["clusters"]] == list(range(K + 2))
    assert sizes == [int(np.sum(assignment == c)) for c in range(K + 2)] and sum(sizes) == len(tokenizer)


def test_tiny_tokenizer_partition(tiny, tiny_clusters):
    model, tokenizer = tiny
    eos = {tokenizer.convert_tokens_to_ids("<|end_of_text|>"), tokenizer.convert_tokens_to_ids("<|eot_id|>")}
    assert set(model.generation_config.eos_token_id) == eos
    digits = list(range(ord("0"), ord("9") + 1))  # the byte tokens of "0".."9"
    _check_partition(tiny_clusters, tokenizer, eos, digits)
    for symbol in "+-*/$%=.,":
        assert tiny_clusters.token_clusters[ord(symbol)] == 1
    for letter in "aZq(":
        assert tiny_clusters.token_clusters[ord(letter)] >= 2


def test_tiny_descriptions_and_files(tiny, tiny_clusters):
    _, tokenizer = tiny
    directory = tiny_clusters.map_path.parent
    on_disk = json.loads((directory / DESCRIPTIONS_FILE).read_text(encoding="utf-8"))
    assert on_disk == tiny_clusters.descriptions
    fixed = on_disk["clusters"][:2]
    assert fixed[0]["kind"] == "fixed" and "end of sequence" in fixed[0]["meaning"]
    assert sorted(fixed[0]["samples"]) == ["<|end_of_text|>", "<|eot_id|>"]
    assert fixed[1]["kind"] == "fixed" and "numbers" in fixed[1]["meaning"] and "0" in fixed[1]["samples"]
    assert all(c["kind"] == "k-means" and c["samples"] for c in on_disk["clusters"][2:])
    reloaded = load_clusters(directory / MAP_FILE, expected_sha256=tiny_clusters.map_sha256)
    assert np.array_equal(reloaded.token_clusters, tiny_clusters.token_clusters)
    assert reloaded.tokenizer_identity == tokenizer_identity(tokenizer) == tiny_clusters.tokenizer_identity
    assert not list(directory.glob(".*.tmp"))


def test_cache_hit_needs_no_embedder(tiny, tiny_clusters):
    _, tokenizer = tiny

    def refuse():
        raise AssertionError("the cache should have answered")

    again = load_or_build_clusters(
        tokenizer,
        embedder_name=tiny_clusters.embedder,
        make_embedder=refuse,
        k=K,
        seed=0,
        eos_ids=tiny_clusters.eos_ids,
        cache_root=tiny_clusters.map_path.parent.parent,
    )
    assert again.map_sha256 == tiny_clusters.map_sha256


def test_changed_cluster_map_is_refused(tiny_clusters, tmp_path):
    copy = tmp_path / MAP_FILE
    copy.write_bytes(tiny_clusters.map_path.read_bytes().replace(b'"k":10', b'"k":11'))
    with pytest.raises(ClusterError, match="the cluster map changed"):
        load_clusters(copy, expected_sha256=tiny_clusters.map_sha256)


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (1000, r"tokens are left for k-means, fewer than k = 1000"),
        # 238 tokens are left, but byte tokens decode alike: only 111 distinct texts, and k-means runs over those
        (200, r"distinct token texts are left for k-means, fewer than k = 200"),
    ],
)
def test_more_clusters_than_tokens_or_distinct_texts_is_refused(tiny, minilm, tmp_path, k, message):
    model, tokenizer = tiny
    with pytest.raises(ClusterError, match=message):
        load_or_build_clusters(
            tokenizer,
            embedder_name=minilm.name,
            make_embedder=lambda: minilm,
            k=k,
            seed=0,
            eos_ids=eos_token_ids(tokenizer, model.generation_config),
            cache_root=tmp_path,
        )


@pytest.mark.measure
def test_minilm_wordpiece_partition(minilm_sample, minilm_clusters):
    tokenizer = minilm_sample
    assert eos_token_ids(tokenizer) == (tokenizer.sep_token_id,)  # BERT has no EOS: [SEP] ends its sequences
    vocab = tokenizer.get_vocab()
    digits = [i for t, i in vocab.items() if re.fullmatch(r"(##)?[0-9]+", t)]
    assert len(digits) > 500 // SAMPLE_EVERY  # "1", "##5", "1990", ...: 500 and more in the whole vocabulary
    _check_partition(minilm_clusters, tokenizer, {tokenizer.sep_token_id}, digits)
    for word in WORDS:
        assert minilm_clusters.token_clusters[vocab[word]] >= 2, word
    for symbol in SYMBOLS:
        assert minilm_clusters.token_clusters[vocab[symbol]] == 1, symbol


def test_smollm2_byte_level_bpe_vocabulary_is_read_as_the_clusters_read_it(smollm2_models_dir):
    """SmolLM2-135M-Instruct's own 49,152-token byte-level BPE tokenizer, as :func:`load_or_build_clusters` reads a
    vocabulary before embedding it: every id decoded alone, its digits and currency and arithmetic symbols
    (space-led ``Ġ$`` too) in cluster 1's rule, word tokens embedded without their space, its EOS from the
    generation config. Clustering the whole vocabulary with MiniLM (minutes on 2 cores) is
    ``benchmarks/bench_steering.py``'s, which runs ``learnerd evolve`` on SmolLM2."""
    from transformers import AutoTokenizer, GenerationConfig

    from learnerd.ml.base_model import resolve_base_model
    from learnerd.steering.clusters import decode_tokens, embedding_text, is_number_token

    path = resolve_base_model("smollm2-135m-instruct", cache_dir=smollm2_models_dir).path
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = decode_tokens(tokenizer)
    assert len(texts) == len(tokenizer) == 49152 and tokenizer_identity(tokenizer).startswith("vocab-49152-")
    eos = eos_token_ids(tokenizer, GenerationConfig.from_pretrained(path))
    assert eos and all(0 <= i < 49152 for i in eos) and tokenizer.eos_token_id in eos
    vocab = tokenizer.get_vocab()
    assert "Ġthe" in vocab and texts[vocab["Ġthe"]] == " the" and embedding_text(texts[vocab["Ġthe"]], "Ġthe") == "the"
    digits = [t for t in vocab if re.fullmatch(r"Ġ?[0-9]+", t)]
    assert sorted(digits) == list("0123456789"), "SmolLM2 splits numbers into single digits"
    assert all(is_number_token(texts[vocab[t]]) for t in (*digits, "Ġ$", "%"))
    words = [vocab[t] for t in ("Ġthe", "Ġcapital", "ĠParis") if t in vocab]
    assert len(words) >= 2 and not any(is_number_token(texts[i]) for i in words)
