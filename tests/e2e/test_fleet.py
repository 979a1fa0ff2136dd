"""Three ``learnerd run`` replicas on one real PostgreSQL, each tailing its own log directory, sharing one
docs directory: one of them is paused (its keys pile up) and then killed with ``kill -9``; the other two
take its keys over once its lease expires. The end state — examples, vectors, probe sections — equals a
single SQLite run over the union of the logs; the reconcile log shows no key reconciled by two replicas
at once; every surviving replica's search gives the same top-k as the reference."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from learnerd.fleet.ownership import owner
from learnerd.store import db
from learnerd.store.dlm import read_document
from tests.integration.test_fleet_parts import TAKEOVER_SLACK_S
from tests.support.daemon import append_blocks
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.in_process import run_cli_here
from tests.support.pipeline import open_store, run_once

REPLICAS = 3
BLOCKS_PER_LOG = 12
TTL_S = 3.0

CONFIG = """\
state_dir = "state"
log_dirs = ["logs"]
docs_dirs = ["{docs}"]

[analyzer]
poll_interval_s = 0.2

[shutdown]
drain_timeout_s = 120.0

[training]
enabled = false

[store]
url = "{url}"

[fleet]
host = "test-host"
lease_ttl_s = {ttl}
heartbeat_s = 0.5
audit = true
"""

TOOLS = ["ls", "du", "df", "ps", "grep", "find", "tar", "curl", "git", "ssh", "top", "cat"]


def blocks_for(replica: int) -> dict[str, tuple[str, str]]:
    """Distinct blocks ``{id: (description, command)}`` for one replica's log directory."""
    return {
        f"r{replica}-b{i:02d}": (f"Use {tool} for task {replica}-{i}", f"{tool} --task {replica}-{i}")
        for i, tool in enumerate(TOOLS[:BLOCKS_PER_LOG])
    }


def comparable(state: Path, store_url: str | None, docs: Path) -> dict:
    conn = open_store(state, store_url)
    try:
        examples = [tuple(r) for r in conn.execute("SELECT id, query, answer, language FROM examples ORDER BY id")]
        embeddings = [
            tuple(r) for r in conn.execute("SELECT example_id, model, text_hash, vector FROM embeddings ORDER BY 1")
        ]
    finally:
        conn.close()
    sections = read_document(docs / "learned.dlm").auto_sections("learnerd/")
    return {
        "examples": examples,
        "embedding_keys": [r[:3] for r in embeddings],
        "vectors": np.stack([np.frombuffer(r[3], dtype="<f4") for r in embeddings]),
        "sections": sorted((s.harvest_source, tuple(s.qa_pairs())) for s in sections),
    }


def count(url: str, sql: str) -> int:
    conn = db.connect(url)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
def test_three_replicas_share_the_work_take_over_a_killed_one_and_equal_one_sqlite_run(
    postgres_url, short_root, tmp_path
):
    db.migrate(postgres_url)
    docs = short_root / "docs"
    roots = [short_root / f"r{i}" for i in range(REPLICAS)]
    for i, root in enumerate(roots):
        (root / "logs").mkdir(parents=True)
        (root / "learnerd.toml").write_text(CONFIG.format(docs=docs, url=postgres_url, ttl=TTL_S))
        append_blocks(root / "logs" / "first.jsonl", dict(list(blocks_for(i).items())[: BLOCKS_PER_LOG // 2]))
    total = REPLICAS * BLOCKS_PER_LOG

    replicas = [DaemonProcess(root, "--log-level", "info", name=f"replica{i}") for i, root in enumerate(roots)]
    try:
        for replica in replicas:
            replica.wait_ready()
        status = replicas[0].client().call("GET", "/status")
        assert len(status["fleet"]["replicas"]) == REPLICAS
        ids = sorted(r["id"] for r in status["fleet"]["replicas"])
        id_of = [next(i for i in ids if i.endswith(str(root / "state"))) for root in roots]
        ctl = run_cli_here("ctl", "status", "--state-dir", str(roots[1] / "state"))
        assert "fleet" in ctl.stdout and "test-host" in ctl.stdout

        # The victim (the replica owning most of the blocks still to come) stops reconciling: the keys it
        # owns, from its own log and sent on by the others, pile up there.
        later = [b for i in range(REPLICAS) for b in list(blocks_for(i))[BLOCKS_PER_LOG // 2 :]]
        v = max(range(REPLICAS), key=lambda i: sum(owner(b, ids) == id_of[i] for b in later))
        victim, victim_id, survivors = replicas[v], id_of[v], [r for i, r in enumerate(replicas) if i != v]
        victim.client().call("POST", "/pause", {})
        for i, root in enumerate(roots):
            append_blocks(root / "logs" / "second.jsonl", dict(list(blocks_for(i).items())[BLOCKS_PER_LOG // 2 :]))
        wait_until(lambda: count(postgres_url, "SELECT count(*) FROM blocks") == total, what="every block ingested")
        owned_by_victim = [b for i in range(REPLICAS) for b in blocks_for(i) if owner(b, ids) == victim_id]
        assert count(postgres_url, "SELECT count(*) FROM examples") < total, "the victim's keys wait"

        victim.proc.send_signal(signal.SIGKILL)
        victim.wait(30)
        wait_until(
            lambda: (
                count(postgres_url, "SELECT count(*) FROM embeddings") == total
                and count(postgres_url, "SELECT count(*) FROM examples") == total
            ),
            timeout=180,
            what="the victim's keys taken over",
        )
        wait_until(
            lambda: (
                (docs / "learned.dlm").exists()
                and len(read_document(docs / "learned.dlm").auto_sections("learnerd/")) == total
            ),
            timeout=120,
            what="every probe section written",
        )
        query = "Use grep for task 1-6"
        hits = []
        for replica in survivors:
            wait_until(lambda r=replica: r.client().call("GET", "/status")["counts"]["indexed"] == total, what="index")
            hits.append([h["id"] for h in replica.client().call("POST", "/search", {"text": query, "k": 5})])
        for replica in survivors:
            replica.signal(signal.SIGTERM)
            assert replica.wait(120) == 0, replica.log_text()[-3000:]
    finally:
        for replica in replicas:
            replica.stop()

    # The victim's keys were reconciled by the survivors; no key ever by two replicas at once.
    conn = db.connect(postgres_url)
    try:
        log_rows = conn.execute("SELECT queue, key, replica, started, finished FROM reconcile_log").fetchall()
    finally:
        conn.close()
    # Its lease was taken when it ended: deleted by a survivor lease_ttl_s after the victim's last renewal,
    # plus the slack justified at tests/integration/test_fleet_parts.py::TAKEOVER_SLACK_S (database clock).
    # (A replica stalled past its own lease on a loaded host, the victim before its death too, is expired and
    # registers again: not the subject. The victim's last expiry is its death's: a dead replica registers no more.)
    expiries = sorted((r for r in log_rows if r[0] == "replicas" and r[1] == victim_id), key=lambda r: r[4])
    (_, _, deleted_by, last_renewal, deleted) = expiries[-1]
    assert deleted_by != victim_id and TTL_S <= deleted - last_renewal <= TTL_S + TAKEOVER_SLACK_S
    survivors_did = {(q, k) for q, k, r, _, _ in log_rows if r != victim_id}
    assert all(("examples", b) in survivors_did for b in owned_by_victim)
    by_key: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for queue, key, replica, started, finished in log_rows:
        by_key.setdefault((queue, key), []).append((started, finished, replica))
    for key, spans in by_key.items():
        if key[0] == "replicas":
            continue  # lease expiries, not reconciles
        busy_until, busy_by = -1.0, ""
        for started, finished, replica in sorted(spans):
            assert replica == busy_by or started >= busy_until, f"{key} reconciled by {busy_by} and {replica} at once"
            if finished > busy_until:
                busy_until, busy_by = finished, replica

    # A single SQLite run over the union of the logs ends in the same state.
    union = tmp_path / "union"
    for i, root in enumerate(roots):
        for log in (root / "logs").iterdir():
            (union / f"r{i}").mkdir(parents=True, exist_ok=True)
            (union / f"r{i}" / log.name).write_bytes(log.read_bytes())
    reference = tmp_path / "reference"
    run_once(reference, union, here=True)  # the reference, not the subject: in this process (no torch import)
    got, want = comparable(roots[0], postgres_url, docs), comparable(reference, None, reference / "docs")
    for key in ("examples", "embedding_keys", "sections"):
        assert got[key] == want[key], f"{key} differ from the single SQLite run"
    np.testing.assert_allclose(got["vectors"], want["vectors"], atol=1e-5)
    offline = run_cli_here("search", query, "-k", "5", "--json", "--state-dir", str(reference))
    assert hits[0] == hits[1] == [h["id"] for h in json.loads(offline.stdout)]


@pytest.mark.slow
def test_the_database_going_away_mid_run_loses_nothing_and_the_replica_recovers(
    postgres_server, postgres_url, short_root
):
    db.migrate(postgres_url)
    root = short_root / "r"
    (root / "logs").mkdir(parents=True)
    (root / "learnerd.toml").write_text(CONFIG.format(docs=short_root / "docs", url=postgres_url, ttl=TTL_S))
    blocks = blocks_for(0)
    first, second = dict(list(blocks.items())[:4]), dict(list(blocks.items())[4:])
    append_blocks(root / "logs" / "a.jsonl", first)
    replica = DaemonProcess(root, "--log-level", "info", name="replica")
    try:
        replica.wait_ready()
        wait_until(lambda: count(postgres_url, "SELECT count(*) FROM embeddings") == len(first), what="first blocks")
        postgres_server.stop()
        append_blocks(root / "logs" / "a.jsonl", second)  # arrives while the database is gone
        wait_until(lambda: "analyzer pass failed" in replica.log_text(), what="a failed pass while it is down")
        assert replica.proc.poll() is None, "the replica keeps running without its database"
        postgres_server.resume()
        wait_until(
            lambda: count(postgres_url, "SELECT count(*) FROM embeddings") == len(blocks),
            timeout=180,
            what="every block reconciled once the database is back",
        )
        assert count(postgres_url, "SELECT count(*) FROM examples") == len(blocks)
        replica.signal(signal.SIGTERM)
        assert replica.wait(120) == 0, replica.log_text()[-3000:]
    finally:
        replica.stop()
        if not (postgres_server.root / "data" / "postmaster.pid").exists():
            postgres_server.resume()
