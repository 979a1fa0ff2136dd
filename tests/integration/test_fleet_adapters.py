"""Adapter commits on a real PostgreSQL (docs/fleet.md, "Adapters"): the ``adapter_commits`` row is the
commit point. A commit leaves a row and a directory — a candidate, current for no reader until its promotion
marks the row (and NOTIFYs the other replicas at its COMMIT); a transaction that fails after the rename
leaves neither; a version directory without a row (renamed by a replica that died before its COMMIT) is
never current and is set aside at resync; concurrent commits of one document get distinct, consecutive
versions."""

from __future__ import annotations

import json
import shutil
import threading

import psycopg
import pytest

from learnerd.fleet import notify
from learnerd.fleet.fleet import PIPELINE_ROLE, TRAIN_ROLE, Fleet
from learnerd.fleet.ledger import AdapterLedger
from learnerd.store import db
from learnerd.store.adapters import AdapterStore, AdapterStoreError
from tests.integration.test_store_adapters import _metadata


@pytest.fixture
def url(postgres_url):
    db.migrate(postgres_url)
    return postgres_url


def replica_store(root, url, replica: str) -> AdapterStore:
    """The shared adapters_dir ``root`` as one replica sees it (its own ledger connection)."""
    return AdapterStore(root, AdapterLedger(url, replica))


def commit(store: AdapterStore, doc_key: str = "learned", **metadata):
    with store.stage(doc_key) as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        return store.commit(staging, _metadata(**metadata))


def rows(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT document, version, replica FROM adapter_commits ORDER BY 1, 2").fetchall()


def test_a_commit_leaves_a_row_and_a_directory_that_every_reader_sees(url, tmp_path):
    gpu, web = replica_store(tmp_path / "adapters", url, "gpu-1"), replica_store(tmp_path / "adapters", url, "web-1")
    try:
        version = commit(gpu)
        assert version.number == 1 and version.path.is_dir()
        assert json.loads((version.path / "metadata.json").read_text())["version"] == 1
        assert rows(url) == [("learned", 1, "gpu-1")]
        assert web.resolve("learned", "v1") == version and web.candidate("learned") == version
        assert web.current("learned") is None  # a candidate until promoted
        assert gpu.promote(version) and web.current("learned") == version
        v2 = commit(gpu, steps=7)
        assert v2.number == 2 and [v.number for v in web.list_versions("learned")] == [1, 2]
        assert web.current("learned") == version and web.candidate("learned") == v2
        assert gpu.promote(v2) and web.current("learned").metadata().steps == 7
        assert not web.promote(version) and gpu.current("learned") == v2  # promotions move forward only
    finally:
        gpu.close()
        web.close()


def test_a_promotion_notifies_the_other_replicas_at_its_commit_and_a_commit_does_not(url, tmp_path):
    gpu = replica_store(tmp_path / "adapters", url, "gpu-1")
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {notify.CHANNEL}")
        try:
            version = commit(gpu)
            assert [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)] == []
            gpu.promote(version)
            got = [notify.parse(n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
        finally:
            gpu.close()
    assert [(m.sender, m.queue, list(m.keys)) for m in got] == [("gpu-1", notify.ADAPTERS, ["learned"])]
    with psycopg.connect(url) as conn:
        promoted = conn.execute("SELECT version FROM adapter_commits WHERE promoted_at IS NOT NULL").fetchall()
    assert promoted == [(1,)]


def test_a_transaction_that_fails_after_the_rename_leaves_neither_row_nor_directory(url, tmp_path):
    store = replica_store(tmp_path / "adapters", url, "gpu-1")
    with psycopg.connect(url, autocommit=True) as conn:  # a real failure at COMMIT, after the rename
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$"
        )
        conn.execute(
            "CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON adapter_commits DEFERRABLE INITIALLY DEFERRED"
            " FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    try:
        with pytest.raises(psycopg.Error, match="refused at commit"):
            commit(store)
        versions_dir = tmp_path / "adapters" / "learned" / "versions"
        assert rows(url) == [] and sorted(p.name for p in versions_dir.iterdir()) == []
        assert store.current("learned") is None
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER refuse ON adapter_commits")
        assert commit(store).number == 1 and rows(url) == [("learned", 1, "gpu-1")]
    finally:
        store.close()


def test_an_orphan_directory_is_never_current_and_is_set_aside_at_resync(url, tmp_path):
    root = tmp_path / "adapters"
    gpu = replica_store(root, url, "gpu-1")
    conn = db.connect(url)
    fleet = Fleet(url, conn, state_dir=tmp_path / "gpu", roles=(PIPELINE_ROLE, TRAIN_ROLE))
    fleet.adapters = gpu
    try:
        v1 = commit(gpu)
        versions_dir = root / "learned" / "versions"

        def orphan(number: int) -> None:  # a replica renamed vNNNN and died before its COMMIT
            shutil.copytree(v1.path, versions_dir / f"v{number:04d}")

        gpu.promote(v1)
        orphan(2)
        assert [v.number for v in gpu.list_versions("learned")] == [1] and gpu.current("learned") == v1
        with pytest.raises(AdapterStoreError, match="no adapter v0002"):
            gpu.resolve("learned", 2)
        v2 = commit(gpu, steps=9)  # the orphan at the target is moved aside, not adopted or overwritten
        assert v2.number == 2 and v2.metadata().steps == 9 and rows(url)[-1] == ("learned", 2, "gpu-1")

        orphan(3)
        assert fleet.set_aside_orphan_adapters() == 1 and fleet.set_aside_orphan_adapters() == 0
        names = sorted(p.name for p in versions_dir.iterdir())
        assert names[-2:] == ["v0001", "v0002"] and len(names) == 4
        assert all(n.startswith((".orphan-v0002-", ".orphan-v0003-")) for n in names[:2])
        assert gpu.promote(v2) and gpu.current("learned") == v2 and [r[1] for r in rows(url)] == [1, 2]
    finally:
        fleet.close()
        conn.close()


def test_concurrent_commits_of_one_document_get_distinct_consecutive_versions(url, tmp_path):
    replicas, per_replica = 4, 3
    stores = [replica_store(tmp_path / "adapters", url, f"gpu-{i}") for i in range(replicas)]
    start = threading.Barrier(replicas)
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def train(i: int) -> None:
        try:
            start.wait()
            got[i] = [commit(stores[i]).number for _ in range(per_replica)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(i,)) for i in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors, errors
        numbers = sorted(n for ns in got.values() for n in ns)
        assert numbers == list(range(1, replicas * per_replica + 1))
        assert [(r[1], r[2]) for r in rows(url)] == sorted((n, f"gpu-{i}") for i, ns in got.items() for n in ns)
        for version in stores[0].list_versions("learned"):
            assert json.loads((version.path / "metadata.json").read_text())["version"] == version.number
    finally:
        for store in stores:
            store.close()
