"""A forget on one replica holds on another: two connections to one store (SQLite file or PostgreSQL), the
tombstone written through one, the other's examples reconciler refusing the block."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.reconcilers.examples import ExamplesReconciler
from learnerd.reconcilers.settings import ExamplesConfig
from learnerd.store import db
from learnerd.store.blocks import BlockEvent, Cell, apply_event
from learnerd.store.examples import get_example
from learnerd.store.forget import forget_in_store
from learnerd.store.tombstones import load_tombstones

pytestmark = pytest.mark.anyio


async def test_a_fleet_peer_never_relearns_what_another_replica_forgot(tmp_path: Path, store_url: str | None):
    target = store_url or tmp_path / "learnerd.db"
    here, peer = db.connect(target), db.connect(target)
    try:
        with db.transaction(peer):
            apply_event(peer, BlockEvent("b1", "test", 1.0, context=(Cell("markup", "List the dev pods"),)), now=1.0)
            event = BlockEvent("b1", "test", 2.0, executed=Cell("code", "kubectl get pods -n dev", "bash"), exit_code=0)
            apply_event(peer, event, now=2.0)
        relearned = []
        reconciler = ExamplesReconciler(peer, ExamplesConfig(), lambda k, old, new: relearned.append(new))
        await reconciler.reconcile("b1")
        assert get_example(peer, "b1") is not None

        report = forget_in_store(here, "match", "get pods -n dev", now=3.0)
        assert [e.id for e in report.examples] == ["b1"] and load_tombstones(peer).all == (report.tombstone,)
        await reconciler.reconcile("b1")  # the peer's resync or backfill after the forget
        assert get_example(peer, "b1") is None and get_example(here, "b1") is None
        assert len(relearned) == 1, "nothing written again"
    finally:
        here.close()
        peer.close()
