import pytest

from learnerd.store import db
from learnerd.store.tombstones import Tombstone, delete_tombstone, load_tombstones, put_tombstone, tombstone_id


def test_a_tombstone_covers_its_blocks_and_a_match_covers_its_text_anywhere():
    by_id = Tombstone("example", "b1", ("b1",))
    assert by_id.covers("b1") and not by_id.covers("b2", ["b1"])
    match = Tombstone("match", "get pods -n dev", ("b1",))
    assert match.covers("b1") and match.covers("b9", ["List pods", "kubectl get pods -n dev"])
    assert not match.covers("b9", ["kubectl get pods -n DEV"]), "a match is case-sensitive"


def test_forgetting_the_same_thing_twice_keeps_one_tombstone_with_every_block(tmp_path):
    conn = db.connect(tmp_path / "db.sqlite")
    with db.transaction(conn):
        first = put_tombstone(conn, Tombstone("source", "/logs/a.jsonl", ("b2", "b1"), 10.0))
        second = put_tombstone(conn, Tombstone("source", "/logs/a.jsonl", ("b3", "b1"), 20.0))
    assert first.block_ids == ("b1", "b2")
    assert second == Tombstone("source", "/logs/a.jsonl", ("b1", "b2", "b3"), 10.0)
    assert load_tombstones(conn).all == (second,)
    assert second.id == tombstone_id("source", "/logs/a.jsonl") and len(second.id) == 16
    with db.transaction(conn):
        assert delete_tombstone(conn, second.id) == second
        assert delete_tombstone(conn, second.id) is None
    assert load_tombstones(conn).all == ()


@pytest.mark.parametrize(("kind", "value"), [("everything", "x"), ("match", "")])
def test_a_tombstone_needs_a_known_kind_and_a_value(tmp_path, kind, value):
    conn = db.connect(tmp_path / "db.sqlite")
    with pytest.raises(ValueError, match=r"kind|value"), db.transaction(conn):
        put_tombstone(conn, Tombstone(kind, value))
