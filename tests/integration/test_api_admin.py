"""The admin API through the real Unix socket, against a daemon running in the test (shared MiniLM)."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from learnerd.daemon.config import load_config
from learnerd.daemon.controllers import PIPELINE
from learnerd.daemon.logging import configure_logging, current_level
from learnerd.daemon.service import ServiceOptions
from learnerd.store.examples import count_examples
from tests.support.daemon import (
    SAMPLE_BLOCKS,
    append_blocks,
    daemon_config,
    eventually,
    get_json,
    post_json,
    running_service,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("restore_log_level")]

BLOCKS = SAMPLE_BLOCKS


async def _counts_are(session, **want: int) -> bool:
    counts = (await get_json(session, "/status"))["counts"]
    return all(counts[k] == v for k, v in want.items())


async def _idle(running) -> bool:
    return all(q.idle for q in running.daemon.queues.values())


async def test_status_shows_the_daemon_its_controllers_and_counts(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    async with running_service(cfg, minilm) as running:
        assert stat.S_IMODE(os.lstat(cfg.state_dir).st_mode) == 0o700
        st = os.lstat(running.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        versions = cfg.layout.adapters_dir / "learned" / "versions"
        (versions / "v0001").mkdir(parents=True)
        (versions / "v0002").mkdir()
        (versions / ".staging-k3j2x").mkdir()  # a version being written does not count
        async with running.session() as s:
            await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
            status = await get_json(s, "/status")
            code, reload_answer = await post_json(s, "/reload")

    assert status["state"] == "running" and status["pid"] == os.getpid()
    assert status["version"] and status["uptime_s"] >= 0 and status["config_path"] is None
    assert status["state_dir"] == str(cfg.state_dir)
    assert status["endpoints"] == {
        "admin_socket": str(cfg.layout.socket_path),
        "metrics": None,
        "search": None,
        "openai": None,
    }
    assert status["counts"] == {"blocks": 3, "examples": 3, "vectors": 3, "indexed": 3, "adapters": 2}
    assert status["embedder"] == {"name": "all-MiniLM-L6-v2", "loaded": True}
    assert set(status["controllers"]) == set(PIPELINE)
    examples = status["controllers"]["examples"]
    for key in ("queue_depth", "waiting", "in_flight", "retries", "failures", "dropped", "last_error", "paused"):
        assert key in examples
    assert examples["queue_depth"] == 0 and examples["in_flight"] == [] and examples["paused"] is False
    assert examples["reconciles"] >= 3 and examples["last_error"] is None
    assert examples["rate_limiter"] == {"base_delay_s": 0.005, "max_delay_s": 1000.0, "qps": 10.0, "burst": 100}
    assert status["analyzer"]["lines_read"] == 6 and status["analyzer"]["blocks_changed"] == 3
    assert code == 409 and "without a config file" in reload_answer["error"]


async def test_pause_queues_blocks_without_reconciling_and_resume_drains(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    log_file = short_root / "logs" / "a.jsonl"
    async with running_service(cfg, minilm) as running, running.session() as s:
        code, answer = await post_json(s, "/pause", {})
        assert code == 200 and answer["paused"] == dict.fromkeys(PIPELINE, True)
        before = (await get_json(s, "/status"))["controllers"]["examples"]["reconciles"]

        append_blocks(log_file, dict(list(BLOCKS.items())[:2]))

        async def depth_is(n: int) -> bool:
            return (await get_json(s, "/status"))["controllers"]["examples"]["queue_depth"] == n

        await eventually(lambda: depth_is(2), what="two blocks queued")
        append_blocks(log_file, dict(list(BLOCKS.items())[2:]))
        await eventually(lambda: depth_is(3), what="the queue grows while blocks arrive")
        status = await get_json(s, "/status")
        assert status["counts"]["blocks"] == 3, "intake keeps recording"
        assert status["counts"]["examples"] == 0 and status["controllers"]["examples"]["reconciles"] == before
        assert count_examples(running.daemon.conn) == 0

        code, answer = await post_json(s, "/resume")
        assert code == 200 and not any(answer["paused"].values())
        await eventually(lambda: depth_is(0), what="the queue drains after resume")
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="everything reconciled after resume")


async def test_pause_one_controller_and_unknown_names(short_root: Path, minilm):
    async with running_service(daemon_config(short_root), minilm) as running, running.session() as s:
        code, answer = await post_json(s, "/pause", {"controller": "probes"})
        assert code == 200 and answer["paused"] == {name: name == "probes" for name in PIPELINE}
        assert running.daemon.controllers["probes"].paused
        code, answer = await post_json(s, "/pause", {"controller": "nope"})
        assert code == 404 and ", ".join(sorted(PIPELINE)) in answer["error"]
        code, answer = await post_json(s, "/resume", {"controller": 7})
        assert code == 400 and "must be str" in answer["error"]
        code, answer = await post_json(s, "/resume", {"controller": "probes"})
        assert code == 200 and answer["paused"]["probes"] is False


async def test_requeue_reconciles_a_key_again(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    async with running_service(cfg, minilm) as running, running.session() as s:
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
        await eventually(lambda: _idle(running), what="queues idle")
        before = running.daemon.controllers["examples"].stats().reconciles
        code, answer = await post_json(s, "/requeue", {"controller": "examples", "key": "b-ls"})
        assert code == 200 and answer == {"controller": "examples", "key": "b-ls", "queue_depth": 1}

        async def reconciled_once_more() -> bool:
            return running.daemon.controllers["examples"].stats().reconciles == before + 1

        await eventually(reconciled_once_more, what="the requeued key reconciled")
        code, answer = await post_json(s, "/requeue", {"controller": "examples"})
        assert code == 400 and "missing field 'key'" in answer["error"]
        code, answer = await post_json(s, "/requeue", {"controller": "training", "key": "x"})
        assert code == 404


async def test_backfill_replays_blocks_and_reports_what_changed(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    async with running_service(cfg, minilm) as running, running.session() as s:
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
        await eventually(lambda: _idle(running), what="queues idle")

        async def finished(job_id: int) -> dict:
            result: dict = {}

            async def done() -> bool:
                result.update(await get_json(s, "/backfill"))
                return result["id"] == job_id and result["state"] != "running"

            await eventually(done, what=f"backfill {job_id} finished")
            return result

        code, job = await post_json(s, "/backfill", {"since": 0})
        assert code == 202 and job["blocks"] == 3 and job["state"] == "running"
        job = await finished(job["id"])
        assert job["state"] == "done" and job["done"] == 3 and job["changes"] == {}, "a replay changes nothing"

        # Lose one vector behind the daemon's back: the replay re-embeds exactly that one.
        running.daemon.conn.execute("DELETE FROM embeddings WHERE example_id = 'b-du'")
        code, job = await post_json(s, "/backfill", {"since": 0})
        job = await finished(job["id"])
        assert job["changes"] == {"embeddings": {"embedded": 1}}
        assert (await get_json(s, "/status"))["backfill"]["id"] == job["id"]

        code, job = await post_json(s, "/backfill", {"since": 4e9})
        assert code == 202 and job["blocks"] == 0
        code, answer = await post_json(s, "/backfill", {"since": "yesterday"})
        assert code == 400 and "must be float" in answer["error"]


async def test_reload_applies_live_settings_and_names_those_needing_a_restart(short_root: Path, minilm):
    path = short_root / "learnerd.toml"
    path.write_text('state_dir = "state"\nlog_dirs = ["logs"]\n')
    (short_root / "logs").mkdir()
    cfg = load_config(path)
    options = ServiceOptions(reload_config=lambda: load_config(path))
    async with running_service(cfg, minilm, options) as running, running.session() as s:
        path.write_text(
            'state_dir = "state"\nlog_dirs = ["logs"]\n'
            '[logging]\nlevel = "debug"\n'
            "[workqueue]\nqps = 3.5\nburst = 7\nbase_delay_s = 0.25\n"
            "[controllers.examples]\ntimeout_s = 5.0\nworkers = 4\n"
            "[analyzer]\npoll_interval_s = 0.5\n"
        )
        code, answer = await post_json(s, "/reload")
        assert code == 200
        assert answer["config_path"] == str(path)
        assert set(answer["applied"]) == {
            "logging.level",
            "workqueue.qps",
            "workqueue.burst",
            "workqueue.base_delay_s",
            "controllers.examples.timeout_s",
        }
        assert set(answer["needs_restart"]) == {"analyzer.poll_interval_s", "controllers.examples.workers"}
        assert answer["changed"]["workqueue.qps"] == [10.0, 3.5]
        status = await get_json(s, "/status")
        assert status["log_level"] == "debug" == current_level()
        for controller in status["controllers"].values():
            assert controller["rate_limiter"] == {"base_delay_s": 0.25, "max_delay_s": 1000.0, "qps": 3.5, "burst": 7}
        assert status["controllers"]["examples"]["timeout_s"] == 5.0
        assert status["controllers"]["examples"]["workers"] == 2, "workers need a restart"
        assert running.daemon.queues["probes"].rate_limiter.when("k") == 0.25  # the new base delay, live

        path.write_text('state_dir = "state"\n[workqueue]\nqps = -1.0\n')
        code, answer = await post_json(s, "/reload")
        assert code == 400 and "qps" in answer["error"]
        status = await get_json(s, "/status")
        assert status["controllers"]["examples"]["rate_limiter"]["qps"] == 3.5, "a bad file changes nothing"


async def test_log_level_can_be_read_and_changed(short_root: Path, minilm):
    configure_logging("info")
    async with running_service(daemon_config(short_root), minilm) as running, running.session() as s:
        assert await get_json(s, "/log-level") == {"level": "info"}
        code, answer = await post_json(s, "/log-level", {"level": "debug"})
        assert code == 200 and answer == {"level": "debug", "previous": "info"}
        assert current_level() == "debug"
        code, answer = await post_json(s, "/log-level", {"level": "loud"})
        assert code == 400 and "unknown log level" in answer["error"]
        assert (await get_json(s, "/status"))["log_level"] == "debug"


WORKQUEUE_FAMILIES = {
    "workqueue_depth": "gauge",
    "workqueue_adds": "counter",
    "workqueue_queue_duration_seconds": "histogram",
    "workqueue_work_duration_seconds": "histogram",
    "workqueue_unfinished_work_seconds": "gauge",
    "workqueue_longest_running_processor_seconds": "gauge",
    "workqueue_retries": "counter",
}


def check_client_go_metrics(text: str) -> None:
    """client-go's workqueue metric names, types and ``name`` label, for every pipeline queue."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in WORKQUEUE_FAMILIES.items():
        assert name in families, f"{name} missing"
        family = families[name]
        assert family.type == kind, f"{name} is a {family.type}"
        queues = set()
        for sample in family.samples:
            labels = dict(sample.labels)
            labels.pop("le", None)
            assert set(labels) == {"name"}, f"{sample.name} has labels {labels}"
            queues.add(labels["name"])
        assert queues == set(PIPELINE), name
    assert "workqueue_adds_total" in {s.name for s in families["workqueue_adds"].samples}
    assert "learnerd_reconcile" in families and "learnerd_analyzer_lines_read" in families


async def test_metrics_on_the_socket_and_over_tcp(short_root: Path, minilm):
    import aiohttp

    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    options = ServiceOptions(metrics_addr=("127.0.0.1", 0))
    async with running_service(daemon_config(short_root), minilm, options) as running, running.session() as s:
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
        async with s.get("/metrics") as response:
            assert response.status == 200 and response.content_type == "text/plain"
            socket_text = await response.text()
        check_client_go_metrics(socket_text)
        assert 'workqueue_adds_total{name="examples"}' in socket_text
        url = (await get_json(s, "/status"))["endpoints"]["metrics"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        async with aiohttp.ClientSession() as tcp, tcp.get(url) as response:
            assert response.status == 200
            check_client_go_metrics(await response.text())
        assert "learnerd_build_info{" in socket_text and "process_resident_memory_bytes" in socket_text
        assert "python_gc_objects_collected_total" in socket_text
        searches = running.daemon.registry.get_sample_value("learnerd_search_duration_seconds_count")
        await post_json(s, "/search", {"text": "print the working directory", "k": 1})
        assert running.daemon.registry.get_sample_value("learnerd_search_duration_seconds_count") == searches + 1
        base = url.removesuffix("/metrics")
        async with aiohttp.ClientSession() as tcp:
            for path, body in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
                async with tcp.get(base + path) as response:
                    assert response.status == 200 and await response.json() == body
        async with aiohttp.ClientSession() as tcp, tcp.get(url.replace("/metrics", "/status")) as response:
            assert response.status == 404, "only /metrics is served over TCP"


async def test_search_on_the_socket_answers_from_the_live_index(short_root: Path, minilm):
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    cfg = daemon_config(short_root)
    cfg.admin.max_body_bytes = 2048
    async with running_service(cfg, minilm) as running, running.session() as s:
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
        calls = minilm.calls
        code, hits = await post_json(s, "/search", {"text": "how big is this folder on disk", "k": 2})
        assert code == 200 and len(hits) == 2
        assert minilm.calls == calls + 1, "one embedding, by the daemon's already loaded model"
        assert hits[0]["answer"] == "du -sh ." and hits[0]["id"] == "b-du"
        assert set(hits[0]) == {"id", "query", "answer", "language", "score"}
        assert hits[0]["language"] == "bash" and "disk space" in hits[0]["query"]
        assert hits[0]["score"] >= hits[1]["score"]
        code, hits = await post_json(s, "/search", {"text": "current directory"})
        assert code == 200 and len(hits) == 3, "k defaults to 3"

        for body, status, words in [
            ({"text": "x", "k": 0}, 400, "k must be in 1..100"),
            ({"text": "x", "k": 101}, 400, "k must be in 1..100"),
            ({"text": "  "}, 400, "must not be empty"),
            ({"k": 2}, 400, "missing field 'text'"),
            ({"text": "x" * 4000}, 413, "Too Large"),
        ]:
            code, answer = await post_json(s, "/search", body)
            assert code == status and words in answer["error"], (body, answer)
        async with s.post("/search", data=b"{not json", headers={"Content-Type": "application/json"}) as response:
            assert response.status == 400 and "not valid JSON" in (await response.json())["error"]
        async with s.get("/nowhere") as response:
            assert response.status == 404 and "error" in await response.json()
        async with s.get("/search") as response:
            assert response.status == 405


async def test_search_over_tcp_needs_the_bearer_token(short_root: Path, minilm):
    import aiohttp

    token = "s3cret-token-of-32-characters-xx"
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    options = ServiceOptions(search_addr=("127.0.0.1", 0), search_token=token)
    async with running_service(daemon_config(short_root), minilm, options) as running, running.session() as s:
        await eventually(lambda: _counts_are(s, examples=3, vectors=3), what="learned")
        url = (await get_json(s, "/status"))["endpoints"]["search"]
        body = {"text": "print the working directory", "k": 1}
        async with aiohttp.ClientSession() as tcp:
            with structlog.testing.capture_logs() as logs:
                async with tcp.post(url, json=body) as response:
                    assert response.status == 401
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
                "search request refused: missing or wrong bearer token"
            ]
            async with tcp.post(url, json=body, headers={"Authorization": f"Bearer {token[:-1]}y"}) as response:
                assert response.status == 401
            async with tcp.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as response:
                assert response.status == 200
                hits = await response.json()
            assert [h["answer"] for h in hits] == ["pwd"]
            big = {"text": "x" * (70 * 1024)}
            async with tcp.post(url, json=big, headers={"Authorization": f"Bearer {token}"}) as response:
                assert response.status == 413


async def test_drain_finishes_queued_work_then_stops_and_removes_the_socket(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    cfg.shutdown.drain_timeout_s = 300.0  # the drain must finish the work, however loaded the machine
    async with running_service(cfg, minilm) as running:
        async with running.session() as s:
            await post_json(s, "/pause", {"controller": "embeddings"})
            append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
            await eventually(lambda: _counts_are(s, examples=3), what="examples written")
            status = await get_json(s, "/status")
            assert status["counts"]["vectors"] == 0 and status["controllers"]["embeddings"]["queue_depth"] == 3
            await post_json(s, "/resume", {"controller": "embeddings"})
            code, answer = await post_json(s, "/drain")
            assert code == 202 and answer == {"state": "draining", "drain_timeout_s": 300.0}
        assert running.stop.is_set()

        async def gone() -> bool:
            return not running.socket.exists()

        await eventually(gone, what="the socket removed once drained")
        summary = running.daemon.summary()
    assert summary.vectors == 3, "queued work is finished before the daemon stops"
    assert all(q.shutting_down and q.idle for q in running.daemon.queues.values())


async def test_a_drain_starts_nothing_on_a_paused_controller_and_the_next_start_lists_its_keys(
    short_root: Path, minilm
):
    cfg = daemon_config(short_root)
    cfg.shutdown.drain_timeout_s = 300.0  # a drain that waited for the paused controller would time out
    with structlog.testing.capture_logs() as logs:
        async with running_service(cfg, minilm) as running, running.session() as s:
            await post_json(s, "/pause", {"controller": "embeddings"})
            append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
            await eventually(lambda: _counts_are(s, examples=3), what="examples written")
            await post_json(s, "/drain")
    assert "drain timed out; cancelling in-flight work" not in [e["event"] for e in logs]

    async with running_service(cfg, minilm) as running, running.session() as s:
        status = await get_json(s, "/status")
        assert status["counts"]["vectors"] == 0, "a paused controller starts nothing, not even in a drain"
        embeddings = status["controllers"]["embeddings"]
        assert embeddings["paused"] and embeddings["queue_depth"] == 3, "the resync listed them, still paused"
        await post_json(s, "/resume", {"controller": "embeddings"})
        await eventually(lambda: _counts_are(s, vectors=3), what="embedded once resumed")


NOBODY = 65534


def _as_nobody(socket_path: Path) -> str:
    """GET /status as uid ``nobody``: a forked child drops to that uid and speaks HTTP on a bare socket
    (forked, not exec-ed: the test's Python may live where nobody cannot read it). Returns the status
    line, or the name of the error ``connect`` raised."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no Python-level cleanup, straight to os._exit
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            sock = socket.socket(socket.AF_UNIX)
            try:
                sock.connect(str(socket_path))
                sock.sendall(b"GET /status HTTP/1.1\r\nHost: learnerd\r\nConnection: close\r\n\r\n")
                answer = sock.recv(4096).split(b"\r\n", 1)[0]
            except OSError as exc:
                answer = type(exc).__name__.encode()
            os.write(write_end, answer)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    os.waitpid(pid, 0)
    return answer


@pytest.mark.skipif(os.getuid() != 0, reason="running a client as another user (nobody) needs root")
async def test_another_uid_is_refused(short_root: Path, minilm):
    os.chmod(short_root, 0o711)  # let nobody traverse to the state directory once it is opened below
    async with running_service(daemon_config(short_root), minilm) as running:
        result = await _in_thread(_as_nobody, running.socket)
        assert result == "PermissionError", "the 0700 state directory keeps other users out"

        # Open the file-system door on purpose: the peer-uid check must still refuse.
        os.chmod(running.daemon.cfg.state_dir, 0o711)
        os.chmod(running.socket, 0o666)
        with structlog.testing.capture_logs() as logs:
            result = await _in_thread(_as_nobody, running.socket)
        assert result == "HTTP/1.1 403 Forbidden"
        refused = [e for e in logs if e["event"].startswith("admin request refused")]
        assert len(refused) == 1 and refused[0]["peer_uid"] == NOBODY and refused[0]["log_level"] == "warning"
        async with running.session() as s:
            assert (await get_json(s, "/status"))["state"] == "running", "the owner is still served"


async def _in_thread(fn, *args):
    import anyio

    return await anyio.to_thread.run_sync(fn, *args)


async def test_admin_requests_are_logged_with_their_peer(short_root: Path, minilm):
    configure_logging("debug")
    async with running_service(daemon_config(short_root), minilm) as running, running.session() as s:
        with structlog.testing.capture_logs() as logs:
            await post_json(s, "/pause", {"controller": "probes"})
            await get_json(s, "/status")
    requests = [e for e in logs if e["event"] == "admin request"]
    assert [(e["method"], e["path"], e["status"], e["log_level"]) for e in requests] == [
        ("POST", "/pause", 200, "info"),
        ("GET", "/status", 200, "debug"),
    ]
    assert all(e["peer_uid"] == os.getuid() and e["peer_pid"] == os.getpid() for e in requests)
    assert json.dumps(requests[0]["duration_s"])
