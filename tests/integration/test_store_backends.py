"""The store modules over both backends, SQLite and a real PostgreSQL: the same calls give the same rows;
a batch's transaction commits or rolls back as a whole; the schema's migrations are checked and applied;
an unreachable server and a lost connection are clear errors, and the connection recovers."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import psycopg
import pytest

from learnerd.store import db, suggestions
from learnerd.store.blocks import BlockEvent, Cell, apply_event, get_block, list_block_ids
from learnerd.store.dlm import read_document
from learnerd.store.embeddings import delete_vectors, get_metas, iter_vectors, put_vectors
from learnerd.store.examples import Example, delete_example, get_examples, list_examples, put_example
from learnerd.store.foyle_traces import PartialTrace, delete_partial_trace, get_partial_trace, put_partial_trace
from learnerd.store.suggestions import ServedAnswer
from learnerd.store.watermarks import Watermark, delete_watermark, load_watermarks, put_watermark
from tests.support.documents import qa_document
from tests.support.pipeline import run_cli


@pytest.fixture
def store(store_url, tmp_path):
    """An open, migrated store of the parametrised backend."""
    target = store_url or tmp_path / "learnerd.db"
    db.migrate(target)
    conn = db.connect(target)
    yield conn
    conn.close()


def test_the_same_calls_give_the_same_rows_on_either_backend(store):
    ev = BlockEvent("b1", "blocklog", 10.0, context=(Cell("markup", "list files"),))
    assert apply_event(store, ev, now=100.0)
    assert not apply_event(store, ev, now=101.0), "a replayed event changes nothing"
    assert apply_event(
        store, BlockEvent("b1", "blocklog", 11.0, executed=Cell("code", "ls", "bash"), exit_code=0), 102.0
    )
    block = get_block(store, "b1")
    assert block.context == [Cell("markup", "list files")] and block.executed == Cell("code", "ls", "bash")
    assert (block.created_at, block.updated_at, block.exit_code) == (100.0, 102.0, 0)
    assert list_block_ids(store, updated_since=101.5) == ["b1"] and list_block_ids(store, updated_since=103) == []

    put_example(store, Example("b1", "list files", "ls", "bash", 5.0))
    put_example(store, Example("b1", "list files", "ls -la", "bash", 6.0))  # replaces
    assert list_examples(store) == [Example("b1", "list files", "ls -la", "bash", 6.0)]
    assert set(get_examples(store, ["b1", "nope"])) == {"b1"}

    vectors = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    put_vectors(store, ["a", "b", "c"], vectors, "m", ["h1", "h2", "h3"], 1.0)
    put_vectors(store, ["b"], vectors[:1], "m", ["h9"], 2.0)
    assert get_metas(store, ["a", "b"])["b"].text_hash == "h9"
    ((ids, matrix),) = list(iter_vectors(store, "m"))
    assert ids == ["a", "b", "c"]
    np.testing.assert_array_equal(matrix, np.stack([vectors[0], vectors[0], vectors[2]]))  # bytes round-trip exactly
    assert delete_vectors(store, ["a", "c", "zz"]) == 2
    assert delete_example(store, "b1") and not delete_example(store, "b1")

    wm = Watermark("/logs/a.jsonl", inode=2**40, offset=2**33, line=7, fingerprint="f", fingerprint_len=3)
    put_watermark(store, wm, 1.0, host="host-a")
    put_watermark(store, Watermark("/logs/a.jsonl", 5, 10, 1), 1.0, host="host-b")  # same path, other host
    assert load_watermarks(store, "host-a") == [wm]
    assert load_watermarks(store, "host-b") == [Watermark("/logs/a.jsonl", 5, 10, 1)]
    delete_watermark(store, "/logs/a.jsonl", host="host-b")
    assert load_watermarks(store, "host-b") == [] and load_watermarks(store, "host-a") == [wm]

    trace = PartialTrace("t1", "generate", '{"a": 1}', None, True, 3.5)
    put_partial_trace(store, trace, 1.0)
    assert get_partial_trace(store, "t1") == trace
    delete_partial_trace(store, "t1")
    assert get_partial_trace(store, "t1") is None


def test_suggestions_are_recorded_resolved_counted_and_pruned_the_same_on_either_backend(store):
    served = ServedAnswer("doc", "v0001", "S", (("user", "pods?"),), "kubectl get pods", ("e1",), 100.0)
    with db.transaction(store):
        first = suggestions.record(store, served, now=100.0)
        second = suggestions.record(store, dataclasses.replace(served, session=None, served_at=101.0), now=101.0)
    ran = BlockEvent("ran", "blocklog", 105.0, executed=Cell("code", "kubectl  get pods"), exit_code=0, session="S")
    with db.transaction(store):
        apply_event(store, ran, now=105.0)
        assert suggestions.resolve(store, ran, now=105.0, window_s=60.0) == first
        assert suggestions.resolve(store, ran, now=105.0, window_s=60.0) is None, "an execution resolves one"
    assert suggestions.get_suggestion(store, first).outcome == "accepted"
    assert get_block(store, first).executed == Cell("code", "kubectl  get pods")
    with db.transaction(store):
        assert suggestions.prune(store, before=100.5) == 1
    assert suggestions.get_suggestion(store, second).outcome is None and get_block(store, second) is not None
    assert suggestions.counts(store) == {"doc": {"v0001": {"served": 2, "accepted": 1, "edited": 0, "failed": 0}}}


def test_a_transaction_and_a_savepoint_roll_back_as_a_whole(store):
    with pytest.raises(RuntimeError), db.transaction(store):
        put_example(store, Example("x", "q", "a"))
        put_watermark(store, Watermark("/l", 1, 1, 1), 1.0)
        raise RuntimeError("crash mid-batch")
    assert list_examples(store) == [] and load_watermarks(store) == []
    with db.transaction(store):
        put_example(store, Example("x", "q", "a"))
        store.execute("SAVEPOINT line")
        put_example(store, Example("y", "q", "a"))
        store.execute("ROLLBACK TO line")
        store.execute("RELEASE line")
    assert [e.id for e in list_examples(store)] == ["x"]


def test_postgres_refuses_a_schema_lacking_a_migration_until_migrated(postgres_url):
    every = tuple(m.key for m in db.declared())
    with pytest.raises(db.SchemaError, match="run learnerd db migrate"):
        db.connect(postgres_url)
    assert db.status(postgres_url).pending == db.declared()
    assert db.migrate(postgres_url) == every
    assert db.migrate(postgres_url) == (), "a second migrate does nothing"
    db.connect(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as raw:
        raw.execute("DELETE FROM schema_migrations WHERE name = %s AND number = %s", every[-1])
    with pytest.raises(
        db.SchemaError, match=re.escape(f"lacks 1 of this learnerd's migrations ({db.label(every[-1:])})")
    ):
        db.connect(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES (%s, %s, 0), ('suggestions', 99, 0)", every[-1])
    with pytest.raises(db.SchemaError, match=r"does not know \(suggestions 99\).*upgrade learnerd"):
        db.connect(postgres_url)


def test_db_check_and_migrate_commands(postgres_url):
    check = run_cli("db", "check", "--store-url", postgres_url, check=False)
    assert check.returncode == 1 and "run learnerd db migrate" in check.stdout
    migrated = run_cli("db", "migrate", "--json", "--store-url", postgres_url)
    assert json.loads(migrated.stdout)["applied"] == [list(m.key) for m in db.declared()]
    check = json.loads(run_cli("db", "check", "--json", "--store-url", postgres_url).stdout)
    assert (check["pending"], check["unknown"]) == ([], []) and len(check["applied"]) == len(db.declared())


def test_an_unreachable_database_is_a_clear_error_and_exit_1(tmp_path):
    url = f"postgresql://nobody@/learnerd?host={tmp_path}"  # no server listens there
    with pytest.raises(db.StoreUnavailable, match="cannot reach the database"):
        db.connect(url)
    proc = run_cli("run", "--once", "--no-train", "--state-dir", str(tmp_path / "s"), "--store-url", url, check=False)
    assert proc.returncode == 1
    assert "cannot reach the database" in proc.stderr and "Traceback" not in proc.stderr
    doc = qa_document(tmp_path / "docs" / "notes.dlm", [("q?", "a.")])
    dlm_id = read_document(doc).frontmatter.dlm_id
    (tmp_path / "s" / "adapters" / dlm_id / "versions" / "v0001").mkdir(parents=True)  # is it committed? ask
    proc = run_cli("eval", str(doc), "--state-dir", str(tmp_path / "s"), "--store-url", url, check=False)
    assert proc.returncode == 1
    assert "cannot reach the database" in proc.stderr and "Traceback" not in proc.stderr


def test_a_lost_connection_fails_the_statement_then_reconnects(postgres_server, postgres_url):
    db.migrate(postgres_url)
    conn = db.connect(postgres_url)
    try:
        put_example(conn, Example("before", "q", "a"))
        postgres_server.restart()  # every session is cut, as by a failover
        with pytest.raises(psycopg.OperationalError), db.transaction(conn):
            put_example(conn, Example("lost", "q", "a"))
        put_example(conn, Example("after", "q", "a"))
        assert [e.id for e in list_examples(conn)] == ["after", "before"]
    finally:
        conn.close()


def test_a_nul_character_is_a_malformed_line_on_postgres_and_the_batch_goes_on(postgres_url):
    from learnerd.analyzer import ingest
    from learnerd.analyzer.blocklog import event_line
    from learnerd.analyzer.tail import RawLine

    db.migrate(postgres_url)
    conn = db.connect(postgres_url)
    try:
        nul = event_line("executed", "b-nul", 1.0, cell=Cell("code", "a\x00b", "bash"), exit_code=0).strip().encode()
        fine = event_line("context", "b-ok", 1.0, cells=[Cell("markup", "ok")]).strip().encode()
        with db.transaction(conn):
            results = [ingest.ingest_line(conn, RawLine(n, data, len(data)), 5.0) for n, data in ((1, nul), (2, fine))]
        assert [r.outcome for r in results] == [ingest.MALFORMED, ingest.EVENTS]
        assert "NUL" in results[0].reason and list_block_ids(conn) == ["b-ok"]
    finally:
        conn.close()


def test_two_replicas_merging_one_block_at_once_lose_nothing(postgres_url):
    """A block's context ingested by one replica while another ingests its execution: the second merge
    waits for the first transaction (the per-block advisory lock) and keeps both parts, where a plain
    read-merge-write would overwrite the context with the empty one it read before the first commit."""
    import threading

    db.migrate(postgres_url)
    first, second = db.connect(postgres_url), db.connect(postgres_url)
    context = BlockEvent("b1", "blocklog", 10.0, context=(Cell("markup", "list files"),))
    executed = BlockEvent("b1", "blocklog", 11.0, executed=Cell("code", "ls -la", "bash"), exit_code=0)
    done = threading.Event()

    def other_replica() -> None:
        with db.transaction(second):
            apply_event(second, executed, now=101.0)
        done.set()

    with db.transaction(first):
        apply_event(first, context, now=100.0)
        thread = threading.Thread(target=other_replica)
        thread.start()
        with psycopg.connect(postgres_url, autocommit=True) as watch:  # the second merge is waiting on a lock
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            for _ in range(600):
                if watch.execute(waiting).fetchone()[0]:
                    break
                done.wait(0.05)
            else:
                raise AssertionError("the second merge never waited for the first")
        assert not done.is_set()
    thread.join(timeout=60)
    block = get_block(first, "b1")
    assert block.context and block.context[0].text == "list files"
    assert block.executed is not None and block.executed.text == "ls -la"
    first.close()
    second.close()
