import numpy as np
import pytest

from learnerd.ml.embedders import EmbedderError, OpenAIEmbedder
from tests.support.openai_server import embeddings_server, fake_vector


def test_minilm_gives_unit_384d_vectors_that_rank_by_meaning(minilm):
    vectors = minilm.embed(["list the files in a directory", "show directory contents", "bake a chocolate cake"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert minilm.embed([]).shape == (0, 384)


def test_openai_embedder_against_a_local_server_batches_and_normalises():
    with embeddings_server(dim=8) as server:
        embedder = OpenAIEmbedder(server.base_url, "text-embedding-3-small", batch_size=2)
        vectors = embedder.embed(["a", "b", "c"])
    assert [len(r["input"]) for r in server.requests] == [2, 1]
    assert server.requests[0]["model"] == "text-embedding-3-small"
    assert vectors.shape == (3, 8) and embedder.dim == 8
    expected = np.asarray(fake_vector("c", 8), dtype=np.float32)
    np.testing.assert_allclose(vectors[2], expected / np.linalg.norm(expected), rtol=1e-5)
    assert embedder.name == "openai:text-embedding-3-small"


def test_openai_embedder_reports_an_unreachable_endpoint():
    embedder = OpenAIEmbedder("http://127.0.0.1:9/v1", "m")
    embedder._client = embedder._client.with_options(max_retries=0, timeout=2.0)
    with pytest.raises(EmbedderError, match="failed"):
        embedder.embed(["x"])


def test_minilm_passes_its_known_answer_test_and_a_model_with_scrambled_weights_fails_it(minilm):
    import torch

    from learnerd.ml.embedders import CANARY_MIN_MARGIN, MiniLMEmbedder, canary_margin

    calls = minilm.calls
    assert canary_margin(minilm) > CANARY_MIN_MARGIN + 0.2
    assert minilm.calls == calls  # the check does not count as an embedder call

    scrambled = MiniLMEmbedder()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in scrambled._model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    assert canary_margin(scrambled) < CANARY_MIN_MARGIN
