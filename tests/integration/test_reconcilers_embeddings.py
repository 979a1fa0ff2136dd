import numpy as np
import pytest

from learnerd.ml.embedders import OpenAIEmbedder
from learnerd.reconcilers.embeddings import EmbeddingsReconciler
from learnerd.store import db
from learnerd.store.embeddings import count_vectors, get_metas, load_index, text_hash
from learnerd.store.examples import Example, delete_example, put_example
from learnerd.store.vector_index import VectorIndex
from tests.support.openai_server import embeddings_server


def add_examples(conn, pairs):
    with db.transaction(conn):
        for i, (q, a) in enumerate(pairs):
            put_example(conn, Example(f"e{i}", q, a, "bash", 1.0))


@pytest.mark.anyio
async def test_batch_embeds_only_what_changed_and_keeps_index_and_table_equal(tmp_path, minilm):
    conn = db.connect(tmp_path / "db.sqlite")
    add_examples(conn, [("list files", "ls"), ("disk usage", "du -sh ."), ("show processes", "ps aux")])
    index = VectorIndex(384)
    rec = EmbeddingsReconciler(conn, minilm, index)
    calls = minilm.calls
    outcomes = await rec.reconcile_batch(["e0", "e1", "e2"])
    assert set(outcomes) == {"e0", "e1", "e2"}
    assert minilm.calls == calls + 1, "one embedder call per batch"
    assert count_vectors(conn) == 3 and len(index) == 3
    assert get_metas(conn, ["e1"])["e1"].text_hash == text_hash("disk usage")

    await rec.reconcile_batch(["e0", "e1", "e2"])
    assert minilm.calls == calls + 1, "unchanged examples are not re-embedded"

    with db.transaction(conn):
        put_example(conn, Example("e1", "how big is this folder", "du -sh .", "bash", 2.0))
        delete_example(conn, "e2")
    await rec.reconcile_batch(["e1", "e2"])
    assert minilm.calls == calls + 2
    assert count_vectors(conn) == 2 and "e2" not in index
    top = index.search(minilm.embed(["folder size"])[0], 1)
    assert top[0][0] == "e1"

    reloaded = load_index(conn, minilm.name, 384)
    for key in ("e0", "e1"):
        np.testing.assert_array_equal(reloaded.get(key), index.get(key))


@pytest.mark.anyio
async def test_model_change_reembeds_through_openai_compatible_endpoint(tmp_path, minilm):
    conn = db.connect(tmp_path / "db.sqlite")
    add_examples(conn, [("list files", "ls"), ("disk usage", "du")])
    await EmbeddingsReconciler(conn, minilm, VectorIndex(384)).reconcile_batch(["e0", "e1"])
    with embeddings_server(dim=8) as server:
        embedder = OpenAIEmbedder(server.base_url, "small")
        index = VectorIndex()
        rec = EmbeddingsReconciler(conn, embedder, index)
        await rec.reconcile_batch(["e0", "e1"])
        await rec.reconcile_batch(["e0", "e1"])
    assert server.texts_embedded == 2, "re-embedded once for the new model, then nothing"
    assert get_metas(conn, ["e0"])["e0"].model == "openai:small"
    assert index.dim == 8 and len(index) == 2
