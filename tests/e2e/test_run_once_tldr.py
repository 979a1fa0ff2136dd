"""``learnerd run --once`` over the fixed ~1,000-block tldr subset: one example and one vector per
block; a second run is a no-op; ``backfill --since`` over everything converges to the same tables.
On SQLite: the same pipeline on PostgreSQL is pinned by ``test_crash_safety.py`` (replays after ``kill -9``
end in the uninterrupted run's tables), ``test_fleet.py`` (three replicas' tables equal one SQLite run's) and
``tests/integration/test_store_backends.py`` (the same calls give the same rows, a replay changes nothing)."""

import shutil

import pytest

from learnerd.store.dlm import read_document
from tests.support.in_process import run_cli_here
from tests.support.pipeline import TldrRun, open_store, run_once, snapshot


@pytest.mark.slow
def test_tldr_subset_learns_every_block_and_replays_change_nothing(tldr_once: TldrRun, tmp_path):
    logs, n, first = tldr_once.logs, tldr_once.blocks, tldr_once.summary  # the first run (a session fixture)
    state = tmp_path / "state"
    shutil.copytree(tldr_once.state, state)  # the replays run on a copy: the session's run is read only
    assert n >= 1000
    assert first["blocks"] == first["examples"] == first["vectors"] == n
    assert first["changes"]["examples"]["written"] == n and first["changes"]["embeddings"]["embedded"] == n
    assert first["embedder_calls"] >= n // 64

    doc_path = state / "docs" / "learned.dlm"
    doc = read_document(doc_path)
    probes = doc.auto_sections("learnerd/")
    conn = open_store(state)
    example_ids = {r[0] for r in conn.execute("SELECT id FROM examples")}
    conn.close()
    assert {s.harvest_source.removeprefix("learnerd/") for s in probes} == example_ids
    for section in probes:
        (pair,) = section.qa_pairs()
        assert pair.probe
    before = snapshot(state)
    doc_bytes, doc_mtime = doc_path.read_bytes(), doc_path.stat().st_mtime_ns

    second = run_once(state, logs, here=True)  # the replays in this process: what they change is the subject
    assert second["embedder_calls"] == 0
    assert not any(v for counts in second["changes"].values() for v in counts.values())
    assert snapshot(state) == before
    assert doc_path.read_bytes() == doc_bytes and doc_path.stat().st_mtime_ns == doc_mtime

    proc = run_cli_here(
        "backfill", "--since", "1970-01-01T00:00:00Z", "--json", "--log-level", "warning",
        "--state-dir", str(state), "--docs-dir", str(state / "docs"),
    )  # fmt: skip
    assert '"embedder_calls": 0' in proc.stdout
    assert snapshot(state) == before, "a replay of unchanged input changes nothing"
    assert doc_path.read_bytes() == doc_bytes
