"""Merging block events: order-independent, replay-safe, ``updated_at`` moves only on a real change."""

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerd.store import db
from learnerd.store.blocks import MAX_FUTURE_S, BlockEvent, BlockRefused, Cell, LineOrigin, apply_event, get_block

NOW = 1_800_000_000.0
CONTENT = "id, source, context, context_time, generated, generated_kind, generated_time, executed, exit_code, eval_mode"

cells = st.builds(Cell, kind=st.sampled_from(["markup", "code"]), text=st.text(max_size=20), language=st.just(""))
events = st.builds(
    BlockEvent,
    block_id=st.just("b"),
    source=st.just("test"),
    time=st.integers(0, 5).map(float),
    context=st.none() | st.lists(cells, max_size=2).map(tuple),
    generated=st.none() | cells,
    executed=st.none() | cells.map(lambda c: Cell("code", c.text)),
    exit_code=st.none() | st.integers(0, 2),
    eval_mode=st.none() | st.booleans(),
)


def merged(evs: list[BlockEvent]) -> tuple:
    conn = db.connect(":memory:")
    with db.transaction(conn):
        for i, ev in enumerate(evs):
            apply_event(conn, ev, now=float(i))
    row = conn.execute(f"SELECT {CONTENT} FROM blocks").fetchone()
    return tuple(row) if row else ()


@settings(max_examples=150, deadline=None)
@given(st.lists(events, min_size=1, max_size=5).filter(
    # Two events of the same time carrying different values for one part are a genuine conflict; keep one per time.
    lambda evs: len({e.time for e in evs}) == len(evs)
), st.randoms())  # fmt: skip
def test_merge_is_order_independent_and_replays_change_nothing(evs, rnd):
    shuffled = list(evs)
    rnd.shuffle(shuffled)
    assert merged(evs) == merged(shuffled)
    assert merged(evs) == merged(evs + evs)


def test_updated_at_moves_only_when_the_row_changes(tmp_path):
    conn: sqlite3.Connection = db.connect(tmp_path / "db.sqlite")
    ev = BlockEvent("b", "test", 10.0, executed=Cell("code", "ls"), exit_code=0)
    with db.transaction(conn):
        assert apply_event(conn, ev, now=100.0)
        assert not apply_event(conn, ev, now=200.0)
        assert not apply_event(conn, BlockEvent("b", "test", 5.0, executed=Cell("code", "old")), now=300.0)
    block = get_block(conn, "b")
    assert (block.executed.text, block.updated_at, block.created_at) == ("ls", 100.0, 100.0)
    with db.transaction(conn):
        assert apply_event(conn, BlockEvent("b", "test", 11.0, executed=Cell("code", "ls -la"), exit_code=0), 400.0)
    assert get_block(conn, "b").updated_at == 400.0


def test_the_executed_cell_keeps_the_log_line_it_was_read_from(tmp_path):
    conn: sqlite3.Connection = db.connect(tmp_path / "db.sqlite")
    run = BlockEvent("b", "test", 10.0, executed=Cell("code", "ls"), exit_code=0)
    with db.transaction(conn):
        assert apply_event(
            conn, BlockEvent("b", "test", 9.0, context=(Cell("markup", "list"),)), 1.0, LineOrigin("a", 1)
        )
        assert get_block(conn, "b").executed_origin is None, "a context event says nothing of the executed cell"
        assert apply_event(conn, run, now=2.0, origin=LineOrigin("/logs/a.jsonl", 7))
        assert not apply_event(conn, run, now=3.0, origin=LineOrigin("/logs/copy.jsonl", 2)), "the same event again"
        assert not apply_event(
            conn, BlockEvent("b", "test", 5.0, executed=Cell("code", "old")), 4.0, LineOrigin("o", 1)
        )
    block = get_block(conn, "b")
    assert (block.executed_origin, block.executed_time, block.updated_at) == (LineOrigin("/logs/a.jsonl", 7), 10.0, 2.0)
    with db.transaction(conn):
        assert apply_event(conn, BlockEvent("b", "test", 11.0, executed=Cell("code", "ls -la"), exit_code=0), 5.0,
                           LineOrigin("/logs/b.jsonl", 3))  # fmt: skip
    assert get_block(conn, "b").executed_origin == LineOrigin("/logs/b.jsonl", 3)


@pytest.mark.parametrize("time", [NOW + MAX_FUTURE_S + 1.0, 1e300, float("inf"), float("nan")])
def test_an_event_more_than_a_day_ahead_is_refused_and_writes_nothing(time: float):
    """Newest wins, so a ``time: 1e300`` would pin the block's cells for ever: refused before any write."""
    conn = db.connect(":memory:")
    with db.transaction(conn):
        apply_event(conn, BlockEvent("b", "atuin", NOW, executed=Cell("code", "ls")), NOW)
        with pytest.raises(BlockRefused, match="more than a day after now"):
            apply_event(conn, BlockEvent("b", "atuin", time, executed=Cell("code", "rm -rf ~")), NOW)
    assert get_block(conn, "b").executed == Cell("code", "ls")
    with db.transaction(conn):
        assert apply_event(conn, BlockEvent("b", "atuin", NOW + MAX_FUTURE_S, executed=Cell("code", "pwd")), NOW)


def test_another_source_may_fill_a_missing_part_but_never_replace_one():
    conn = db.connect(":memory:")
    with db.transaction(conn):
        apply_event(conn, BlockEvent("atuin:1", "atuin", NOW, executed=Cell("code", "make test")), NOW)
        with pytest.raises(BlockRefused, match="already holds its executed cell"):
            apply_event(conn, BlockEvent("atuin:1", "learnerd", NOW + 5, executed=Cell("code", "curl x | sh")), NOW)
        assert apply_event(conn, BlockEvent("atuin:1", "learnerd", NOW + 5, context=(Cell("markup", "run it"),)), NOW)
        with pytest.raises(BlockRefused, match="already holds its context"):
            apply_event(conn, BlockEvent("atuin:1", "learnerd", NOW + 9, context=(Cell("markup", "ignore that"),)), NOW)
        assert apply_event(conn, BlockEvent("atuin:1", "atuin", NOW + 9, executed=Cell("code", "make check")), NOW)
    block = get_block(conn, "atuin:1")
    assert (block.source, block.executed.text, block.context) == ("atuin", "make check", [Cell("markup", "run it")])
