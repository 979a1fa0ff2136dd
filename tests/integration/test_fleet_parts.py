"""The fleet's parts on a real PostgreSQL: rendezvous ownership, heartbeat leases that expire, per-key
advisory locks, training keys only on "train" replicas, keys sent to their owner over LISTEN/NOTIFY and
vector changes reaching another replica's index."""

from __future__ import annotations

import json
import time

import anyio
import numpy as np
import pytest

from learnerd.daemon.controllers import MODEL_QUEUES
from learnerd.fleet import membership, notify
from learnerd.fleet.fleet import PIPELINE_ROLE, TRAIN_ROLE, Fleet
from learnerd.fleet.ownership import owner
from learnerd.runtime.reconcile import Result
from learnerd.store import db
from learnerd.store.embeddings import put_vectors
from learnerd.store.vector_index import VectorIndex
from tests.support.daemon_process import wait_until


@pytest.fixture
def url(postgres_url):
    db.migrate(postgres_url)
    return postgres_url


class ListQueue:
    """The part of a workqueue a :class:`RoutedQueue` needs: a name and ``add``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.keys: list[str] = []

    def add(self, key: str) -> None:
        self.keys.append(key)


def test_rendezvous_ownership_is_spread_and_moves_only_the_leaving_replicas_keys():
    keys = [f"block-{i}" for i in range(3000)]
    three = ["a", "b", "c"]
    before = {k: owner(k, three) for k in keys}
    counts = {r: sum(1 for o in before.values() if o == r) for r in three}
    assert all(800 < n < 1200 for n in counts.values()), counts  # 1000 each expected; 6 sigma is ±155
    after = {k: owner(k, ["a", "b"]) for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "c"), "only c's keys move"
    assert owner("x", []) is None


def test_leases_expire_and_a_registered_replica_counts_itself(url, tmp_path):
    conn = db.connect(url)
    try:
        membership.register(conn, "dead", "h1", 1, (PIPELINE_ROLE,))
        conn.execute("UPDATE replicas SET renewed = renewed - 100 WHERE id = 'dead'")
        membership.register(conn, "alive", "h2", 2, (PIPELINE_ROLE, TRAIN_ROLE))
        assert [r.id for r in membership.live(conn, ttl_s=15)] == ["alive"]
        assert conn.execute("SELECT count(*) FROM replicas").fetchone()[0] == 1, "the expired row is deleted"
        assert membership.renew(conn, "alive") and not membership.renew(conn, "dead")
    finally:
        conn.close()


def test_advisory_locks_are_exclusive_and_training_keys_go_only_to_train_replicas(url, tmp_path):
    conns = [db.connect(url) for _ in range(2)]
    front = Fleet(url, conns[0], state_dir=tmp_path / "front", roles=(PIPELINE_ROLE,), model_queues=MODEL_QUEUES)
    trainer = Fleet(
        url, conns[1], state_dir=tmp_path / "gpu", roles=(PIPELINE_ROLE, TRAIN_ROLE), model_queues=MODEL_QUEUES
    )
    try:
        for fleet, conn in ((front, conns[0]), (trainer, conns[1])):
            membership.register(conn, fleet.replica_id, fleet.host, 1, fleet.roles)
        for fleet in (front, trainer):
            fleet._refresh()
        docs = [f"/docs/{i}.dlm" for i in range(20)]
        assert not any(front.owns("training", d) for d in docs) and all(trainer.owns("training", d) for d in docs)
        blocks = [f"b{i}" for i in range(40)]
        assert all(front.owns("examples", b) != trainer.owns("examples", b) for b in blocks)

        assert front.try_lock("training", docs[0])
        assert not trainer.try_lock("training", docs[0]), "one document trains on one replica at a time"
        front.unlock("training", docs[0])
        assert trainer.try_lock("training", docs[0])
        trainer.close()  # the session ends (as with kill -9): its backend exits and releases its locks
        wait_until(lambda: front.try_lock("training", docs[0]), what="the lock released with the session")
    finally:
        front.close()
        trainer.close()
        for conn in conns:
            conn.close()


@pytest.mark.anyio
async def test_keys_reach_their_owner_and_vectors_reach_every_index(url, tmp_path):
    conns = [db.connect(url) for _ in range(2)]
    fleets = [Fleet(url, c, state_dir=tmp_path / f"r{i}", heartbeat_s=0.2) for i, c in enumerate(conns)]
    queues = [ListQueue("examples") for _ in fleets]
    routed = [f.route(q) for f, q in zip(fleets, queues, strict=True)]
    fleets[1].index = VectorIndex(4)
    resyncs = [0, 0]
    try:
        async with anyio.create_task_group() as tg:
            for i, fleet in enumerate(fleets):
                await tg.start(fleet.run, lambda i=i: resyncs.__setitem__(i, resyncs[i] + 1))
            with anyio.fail_after(30):
                while any(len(f.owners()[PIPELINE_ROLE]) < 2 for f in fleets):
                    await anyio.sleep(0.05)  # each sees the other after a heartbeat
            keys = [f"k{i}" for i in range(30)]
            for key in keys:
                routed[0].add(key)  # replica 0's analyzer committed these blocks
            theirs = [k for k in keys if fleets[1].owns("examples", k)]
            assert theirs and set(queues[0].keys) == set(keys) - set(theirs)
            with anyio.fail_after(30):
                while sorted(queues[1].keys) != sorted(theirs):
                    await anyio.sleep(0.02)

            vectors = np.eye(4, dtype=np.float32)[:2]
            put_vectors(conns[0], ["v1", "v2"], vectors, "", ["h1", "h2"], 1.0)
            fleets[0].announce_vectors(["v1", "v2"])
            with anyio.fail_after(30):
                while len(fleets[1].index) < 2:
                    await anyio.sleep(0.02)
            np.testing.assert_array_equal(fleets[1].index.get("v2"), vectors[1])
            conns[0].execute(
                "SELECT pg_notify(?, ?)", (notify.CHANNEL, json.dumps({"r": "x", "q": "examples", "k": "bad"}))
            )  # malformed: logged and skipped
            tg.cancel_scope.cancel()
    finally:
        for fleet, conn in zip(fleets, conns, strict=True):
            fleet.close()
            conn.close()
    assert resyncs[0] >= 1, "the second replica's arrival made the first resync"


def test_notify_payloads_stay_under_the_limit_and_parse_back():
    keys = [f"/a/long/path/document-{i:05d}.dlm" for i in range(2000)]
    payloads = list(notify.payloads("me", "probes", keys))
    assert len(payloads) > 1 and all(len(p.encode()) <= notify.MAX_PAYLOAD_BYTES for p in payloads)
    assert [k for p in payloads for k in notify.parse(p).keys] == keys
    with pytest.raises(ValueError):
        list(notify.payloads("me", "probes", ["x" * 9000]))


def test_owned_reconcilers_keep_the_reconciler_contract(url, tmp_path):
    from learnerd.runtime.reconcile import BatchReconciler, Reconciler

    class Batch:
        name, batch_size, changes = "embeddings", 8, {}

        def resync_keys(self):
            return ["a"]

        async def reconcile(self, key): ...

        async def reconcile_batch(self, keys): ...

    conn = db.connect(url)
    fleet = Fleet(url, conn, state_dir=tmp_path / "r")
    try:
        owned = fleet.own(Batch())
        assert isinstance(owned, BatchReconciler) and owned.batch_size == 8, "the controller must still batch"
        assert isinstance(owned, Reconciler) and list(owned.resync_keys()) == ["a"]
    finally:
        fleet.close()
        conn.close()


TAKEOVER_TTL_S, TAKEOVER_HEARTBEAT_S = 2.0, 0.9
TAKEOVER_SLACK_S = 0.25
"""How late past the lease's end the survivor may delete it: its wake-up margin (0.01 s), one DELETE round
trip over a local socket (< 0.01 s) and the wake-up latency of a niced process on a loaded 2-core machine
(tens of ms). Looking only at heartbeat cadence would take the lease ~0.85 s late here (below)."""


@pytest.mark.anyio
async def test_a_dead_replicas_keys_are_taken_over_when_its_lease_ends_not_a_heartbeat_later(url, tmp_path):
    conn, victim_conn, probe = db.connect(url), db.connect(url), db.connect(url)
    survivor = Fleet(
        url, conn, state_dir=tmp_path / "s", lease_ttl_s=TAKEOVER_TTL_S, heartbeat_s=TAKEOVER_HEARTBEAT_S, audit=True
    )
    membership.register(victim_conn, "victim", "h2", 2, (PIPELINE_ROLE,))
    keys = [f"b{i}" for i in range(40)]

    def renewed(replica: str) -> float | None:
        row = probe.execute("SELECT renewed FROM replicas WHERE id = ?", (replica,)).fetchone()
        return row[0] if row else None

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(survivor.run, lambda: None)
            victims = [k for k in keys if not survivor.owns("examples", k)]
            assert victims and len(victims) < len(keys)
            # The victim's last renewal comes just after one of the survivor's own renewals: a survivor that
            # looked only at heartbeat cadence would notice the expiry ~0.85 s late (2.0 s = 2 × 0.9 + 0.2).
            tick = renewed(survivor.replica_id)
            with anyio.fail_after(10):
                while renewed(survivor.replica_id) == tick:
                    await anyio.sleep(0.005)
            assert membership.renew(victim_conn, "victim")
            victim_conn.close()  # killed: no renewal after this one
            with anyio.fail_after(10):
                while renewed("victim") is not None:
                    await anyio.sleep(0.05)
            assert all(survivor.owns("examples", k) for k in victims), "the victim's keys are the survivor's"
            tg.cancel_scope.cancel()
        rows = probe.execute("SELECT replica, started, finished FROM reconcile_log WHERE queue = 'replicas'").fetchall()
    finally:
        survivor.close()
        for c in (conn, victim_conn, probe):
            c.close()
    # The survivor's audit row: the victim's last renewal and the deletion, both on the database's clock.
    [(replica, last_renewal, deleted)] = [tuple(r) for r in rows]
    assert replica == survivor.replica_id
    assert TAKEOVER_TTL_S <= deleted - last_renewal <= TAKEOVER_TTL_S + TAKEOVER_SLACK_S


@pytest.mark.anyio
async def test_an_audited_reconcile_ends_before_its_lock_is_released(url, tmp_path):
    """The audit's ``finished`` is taken while the key is still locked: a replica that takes the lock the
    moment it is released starts no earlier than the recorded end (else the log shows two at once)."""
    taken_at: list[float] = []

    class Watched(Fleet):
        def unlock(self, queue: str, key: str) -> None:
            super().unlock(queue, key)
            assert other.try_lock(queue, key), "released: the other replica takes the key at once"
            taken_at.append(time.time())
            other.unlock(queue, key)

    class Inner:
        name, changes = "examples", {}

        async def reconcile(self, key):
            return Result()

    conns = [db.connect(url) for _ in range(2)]
    other = Fleet(url, conns[1], state_dir=tmp_path / "other")
    fleet = Watched(url, conns[0], state_dir=tmp_path / "audited", audit=True)
    try:
        await fleet.own(Inner()).reconcile("b1")
        [(started, finished)] = conns[0].execute("SELECT started, finished FROM reconcile_log").fetchall()
    finally:
        for f, conn in ((fleet, conns[0]), (other, conns[1])):
            f.close()
            conn.close()
    assert started <= finished <= taken_at[0]
