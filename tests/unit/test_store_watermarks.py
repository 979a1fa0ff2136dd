"""Watermark and partial-trace rows."""

from __future__ import annotations

from pathlib import Path

from learnerd.store.db import connect, transaction
from learnerd.store.foyle_traces import (
    PartialTrace,
    count_partial_traces,
    delete_partial_trace,
    get_partial_trace,
    put_partial_trace,
)
from learnerd.store.watermarks import Watermark, delete_watermark, fingerprint_of, load_watermarks, put_watermark


def test_watermarks_round_trip_and_replace(tmp_path: Path):
    conn = connect(tmp_path / "db.sqlite")
    with transaction(conn):
        put_watermark(conn, Watermark("/l/b.jsonl", 7, 10, 2, fingerprint_of(b"abc"), 3), now=1.0)
        put_watermark(conn, Watermark("/l/a.jsonl", 8, 0, 0), now=1.0)
        put_watermark(conn, Watermark("/l/b.jsonl", 7, 20, 4, fingerprint_of(b"abc"), 3), now=2.0)
    assert load_watermarks(conn) == [
        Watermark("/l/a.jsonl", 8, 0, 0),
        Watermark("/l/b.jsonl", 7, 20, 4, fingerprint_of(b"abc"), 3),
    ]
    with transaction(conn):
        delete_watermark(conn, "/l/a.jsonl")
        delete_watermark(conn, "/l/none.jsonl")
    assert [w.path for w in load_watermarks(conn)] == ["/l/b.jsonl"]


def test_partial_traces_round_trip(tmp_path: Path):
    conn = connect(tmp_path / "db.sqlite")
    trace = PartialTrace("t1", "generate", '{"request":{}}', None, True, 5.0)
    with transaction(conn):
        put_partial_trace(conn, trace, now=6.0)
    assert get_partial_trace(conn, "t1") == trace and count_partial_traces(conn) == 1
    with transaction(conn):
        delete_partial_trace(conn, "t1")
    assert get_partial_trace(conn, "t1") is None and count_partial_traces(conn) == 0
