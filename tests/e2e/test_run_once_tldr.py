"""``learnerd run --once`` over the fixed ~1,000-block tldr subset: one example and one vector per
block; a second run is a no-op; ``backfill --since`` over everything converges to the same tables
(on either store backend)."""

import pytest

from benchmarks.tldr_to_blocklog import convert
from learnerd.store.dlm import read_document
from tests.support.pipeline import open_store, run_cli, run_once, snapshot, store_args


@pytest.fixture(scope="module")
def tldr_logs(peer_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("tldr-logs")
    n = convert(peer_data / "tldr", out, limit=1000)
    return out, n


@pytest.mark.slow
def test_tldr_subset_learns_every_block_and_replays_change_nothing(tldr_logs, tmp_path, store_url):
    logs, n = tldr_logs
    state = tmp_path / "state"
    first = run_once(state, logs, store_url=store_url)
    assert n >= 1000
    assert first["blocks"] == first["examples"] == first["vectors"] == n
    assert first["changes"]["examples"]["written"] == n and first["changes"]["embeddings"]["embedded"] == n
    assert first["embedder_calls"] >= n // 64

    doc_path = state / "docs" / "learned.dlm"
    doc = read_document(doc_path)
    probes = doc.auto_sections("learnerd/")
    conn = open_store(state, store_url)
    example_ids = {r[0] for r in conn.execute("SELECT id FROM examples")}
    conn.close()
    assert {s.harvest_source.removeprefix("learnerd/") for s in probes} == example_ids
    for section in probes:
        (pair,) = section.qa_pairs()
        assert pair.probe
    before = snapshot(state, store_url)
    doc_bytes, doc_mtime = doc_path.read_bytes(), doc_path.stat().st_mtime_ns

    second = run_once(state, logs, store_url=store_url)
    assert second["embedder_calls"] == 0
    assert not any(v for counts in second["changes"].values() for v in counts.values())
    assert snapshot(state, store_url) == before
    assert doc_path.read_bytes() == doc_bytes and doc_path.stat().st_mtime_ns == doc_mtime

    proc = run_cli(
        "backfill", "--since", "1970-01-01T00:00:00Z", "--json", "--log-level", "warning",
        "--state-dir", str(state), "--docs-dir", str(state / "docs"), *store_args(store_url),
    )  # fmt: skip
    assert '"embedder_calls": 0' in proc.stdout
    assert snapshot(state, store_url) == before, "a replay of unchanged input changes nothing"
    assert doc_path.read_bytes() == doc_bytes
