"""Training on PostgreSQL, end to end: two real ``learnerd run`` replicas on one PostgreSQL database and one
shared adapters_dir. The GPU-host replica trains the tiny built-in model on a saved document and commits
v0001 (its ``adapter_commits`` row and its directory); the CPU front end (``[training] enabled = false``)
never trains, yet reports that version (``ctl status``'s adapter count) and serves it on its OpenAI
endpoint, told by the committing transaction's NOTIFY.

And two training replicas, the one mid-cycle killed (``kill -9``, and separately SIGTERM): the survivor's
first cycle after the death commits the version, started within the lease TTL (plus a takeover margin) of
the death, and no ``.staging-*`` directory outlives its resync."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest

from learnerd.fleet.ledger import AdapterLedger
from learnerd.store import db
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.documents import qa_document
from tests.support.serving import TOKEN, client

pytestmark = pytest.mark.slow

CONFIG = """\
state_dir = "state"
log_dirs = ["logs"]
docs_dirs = ["{docs}"]

[shutdown]
drain_timeout_s = 60.0

[training]
enabled = {train}
debounce_s = 0.3
num_threads = 1
niceness = 0
warm_spare = false
rescan_interval_s = 1.0

[controllers.evaluation]
workers = 1

[evaluation]
null_runs = 0
max_prompts = 1

[store]
url = "{url}"
adapters_dir = "{adapters}"

[fleet]
host = "{host}"
lease_ttl_s = 15.0
heartbeat_s = 3.0
audit = true
"""


def replica_root(root: Path, models_dir: Path, **fields: str) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "state").mkdir()
    (root / "state" / "models").symlink_to(models_dir)  # the session's built-in tiny model, built once
    (root / "learnerd.toml").write_text(CONFIG.format(**fields))
    return root


def served_adapter(url: str) -> str | None:
    models = {m.id: m for m in client(url).models.list()}
    return models["notes"].model_extra["learnerd"]["adapter"] if "notes" in models else None


def test_a_training_replica_commits_on_postgresql_and_a_front_end_serves_the_version(
    postgres_url, short_root, models_dir, tiny_model_dir
):
    db.migrate(postgres_url)
    docs, adapters = short_root / "docs", short_root / "adapters"
    common = {"docs": docs, "url": postgres_url, "adapters": adapters}
    gpu_root = replica_root(short_root / "gpu", models_dir, train="true", host="gpu-1", **common)
    web_root = replica_root(short_root / "web", models_dir, train="false", host="web-1", **common)
    gpu_id, web_id = f"gpu-1:{gpu_root / 'state'}", f"web-1:{web_root / 'state'}"

    gpu = DaemonProcess(gpu_root, "--log-level", "info", name="gpu")
    web = DaemonProcess(
        web_root,
        "--log-level",
        "info",
        "--listen-openai",
        "127.0.0.1:0",
        name="web",
        env={"LEARNERD_OPENAI_TOKEN": TOKEN},
    )
    try:
        gpu.wait_ready()
        web.wait_ready()
        url = web.client().call("GET", "/status")["endpoints"]["openai"]
        assert served_adapter(url) is None  # asked before the commit: the front end caches "no adapter"

        doc = qa_document(docs / "notes.dlm", QA_PAIRS[:2], training={"learning_rate": 1e-2, "max_steps": 4})
        dlm_id = read_document(doc).frontmatter.dlm_id
        wait_until(lambda: served_adapter(url) == "v0001", timeout=300, what="v0001 promoted, served by the front end")

        with psycopg.connect(postgres_url) as conn:
            commits = conn.execute("SELECT document, version, replica FROM adapter_commits").fetchall()
            trained_by = conn.execute("SELECT DISTINCT replica FROM reconcile_log WHERE queue = 'training'").fetchall()
        assert commits == [(dlm_id, 1, gpu_id)]
        assert trained_by == [(gpu_id,)]  # the front end never trains
        version_dir = adapters / dlm_id / "versions" / "v0001"
        assert (version_dir / "adapter_config.json").is_file() and (version_dir / "metadata.json").is_file()
        reader = AdapterStore(adapters, AdapterLedger(postgres_url, "test"))
        try:
            assert reader.current(dlm_id).path == version_dir
        finally:
            reader.close()
        status = web.client().call("GET", "/status")
        assert status["counts"]["adapters"] == 1 and "training" not in status["controllers"]
        assert [r["id"] for r in status["fleet"]["replicas"]] == sorted([gpu_id, web_id])
        for replica in (web, gpu):
            replica.signal(signal.SIGTERM)
            assert replica.wait(120) == 0, replica.log_text()[-3000:]
    finally:
        web.stop()
        gpu.stop()


def _training_in_flight(replica: DaemonProcess) -> bool:
    try:
        status = replica.client().call("GET", "/status")
    except Exception:  # not answering (yet, or any more)
        return False
    return bool(status["controllers"].get("training", {}).get("in_flight"))


STEPS = 150
"""The kill test's cycle length. Its staging directory is made before the training process starts, and the signal
follows it within a poll (0.1 s): the trainer is still importing torch then, seconds before its first step, so
the steps only widen a margin that is already seconds; the survivor trains them all, so no more than that."""
LEASE_TTL_S, HEARTBEAT_S = 4.0, 1.0
"""The short lease of the kill test: the survivor takes over in seconds."""
TAKEOVER_SLACK_S = 10.0
"""What the survivor may take, past the dead replica's lease, to start its cycle: the membership read at
the lease's end, a resync, the training debounce (0.3 s), on a loaded shared machine."""


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_when_the_training_replica_dies_mid_cycle_a_survivor_commits_and_no_staging_is_left(
    postgres_url, short_root, models_dir, tiny_model_dir, signum
):
    db.migrate(postgres_url)
    docs, adapters = short_root / "docs", short_root / "adapters"
    common = {"docs": docs, "url": postgres_url, "adapters": adapters, "train": "true"}
    roots = [replica_root(short_root / f"gpu{i}", models_dir, host=f"gpu-{i}", **common) for i in (1, 2)]
    for root in roots:  # a short lease: the survivor takes over in seconds
        config = root / "learnerd.toml"
        config.write_text(config.read_text().replace("lease_ttl_s = 15.0", f"lease_ttl_s = {LEASE_TTL_S}").replace(
            "heartbeat_s = 3.0", f"heartbeat_s = {HEARTBEAT_S}"))  # fmt: skip
    replicas = [DaemonProcess(root, "--log-level", "info", name=f"gpu{i}") for i, root in enumerate(roots, 1)]
    try:
        for replica in replicas:
            replica.wait_ready()
        doc = qa_document(docs / "notes.dlm", QA_PAIRS[:2], training={"learning_rate": 1e-2, "max_steps": STEPS})
        dlm_id = read_document(doc).frontmatter.dlm_id
        versions = adapters / dlm_id / "versions"
        wait_until(lambda: any(_training_in_flight(r) for r in replicas), timeout=120, what="a cycle in flight")
        trainer = next(r for r in replicas if _training_in_flight(r))
        survivor = next(r for r in replicas if r is not trainer)
        wait_until(lambda: any(versions.glob(".staging-*")), timeout=60, what="the cycle's staging directory")
        killed_at = time.time()
        trainer.signal(signum)
        trainer.wait(120)
        # kill -9: the lease runs out lease_ttl_s after the last renewal; SIGTERM: the drain ends the cycle
        # (nothing committed) and the clean stop gives the lease back, the keys move at the next heartbeat
        since = killed_at if signum == signal.SIGKILL else time.time()

        reader = AdapterStore(adapters, AdapterLedger(postgres_url, "test"))
        try:
            wait_until(lambda: reader.current(dlm_id) is not None, timeout=300, what="the survivor's commit")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the survivor's log:\n{survivor.log_text()[-6000:]}") from None
        finally:
            reader.close()
        survivor_id, trainer_id = (
            f"{r.root.name.replace('gpu', 'gpu-')}:{r.root / 'state'}" for r in (survivor, trainer)
        )
        with psycopg.connect(postgres_url) as conn:
            commits = conn.execute("SELECT version, replica, committed_at FROM adapter_commits").fetchall()
            cycles = conn.execute(
                "SELECT key, started, finished FROM reconcile_log WHERE queue = 'training' AND replica = %s"
                " AND started >= %s ORDER BY started",
                (survivor_id, killed_at),
            ).fetchall()
            expiries = conn.execute(
                "SELECT key, replica, started, finished FROM reconcile_log WHERE queue = 'replicas'"
            ).fetchall()
        assert [c[:2] for c in commits] == [(1, survivor_id)], "the dead replica committed nothing; the survivor v0001"
        committed_at = commits[0][2]
        _, cycle_started, cycle_finished = cycles[0]
        assert cycle_started <= committed_at <= cycle_finished, "the survivor's first cycle after the kill committed"
        if signum == signal.SIGKILL:  # the lease ran out; with SIGTERM the clean stop gave it back at once
            # (a replica stalled past its 4 s lease on a loaded host before the kill is expired and registers
            # again: not the subject; an expiry recorded after the kill is the dead trainer's, by the survivor)
            assert [e[:2] for e in expiries if e[3] >= killed_at] == [(trainer_id, survivor_id)], expiries
        taken_over_in = cycle_started - since
        assert taken_over_in <= LEASE_TTL_S + TAKEOVER_SLACK_S, (
            f"the survivor started its cycle {taken_over_in:.1f} s after the trainer died (lease {LEASE_TTL_S} s); "
            f"committed {committed_at - since:.1f} s after, its cycle took {cycle_finished - cycle_started:.1f} s"
        )
        assert not list(versions.glob(".staging-*")), "the dead replica's staging directory went at the resync"
        survivor.signal(signal.SIGTERM)
        assert survivor.wait(120) == 0, survivor.log_text()[-3000:]
    finally:
        for replica in replicas:
            replica.stop()
