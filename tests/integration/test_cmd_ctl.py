"""``learnerd ctl``, ``learnerd search`` and ``learnerd backfill`` against a daemon running in the test,
and the messages when there is no daemon or the socket is not ours."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import anyio
import pytest

from learnerd.api.settings import ServeConfig
from learnerd.api.unix_socket import bind_admin_socket, remove_admin_socket
from learnerd.cmd._client import AdminClient
from learnerd.cmd._common import CommandError
from learnerd.cmd.main import main
from learnerd.daemon.logging import current_level
from learnerd.daemon.service import INSECURE_WARNING, ServiceOptions
from learnerd.store.state_dir import secure_state_dir
from learnerd.store.suggestions import ServedAnswer
from tests.support.daemon import SAMPLE_BLOCKS, append_blocks, daemon_config, eventually, running_service
from tests.support.logs import capture_all_logs

pytestmark = pytest.mark.usefixtures("restore_log_level")

BLOCKS = dict(list(SAMPLE_BLOCKS.items())[:2])


async def learnerd(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a worker thread (it runs its own event loop); return (status, stdout, stderr)."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.anyio
async def test_ctl_commands_on_a_running_daemon(short_root: Path, minilm, capsys):
    cfg = daemon_config(short_root)
    append_blocks(short_root / "logs" / "a.jsonl", BLOCKS)
    at = ("--state-dir", str(cfg.state_dir))
    async with running_service(cfg, minilm) as running:

        async def learned() -> bool:
            return len(running.daemon.index) == 2 and all(q.idle for q in running.daemon.queues.values())

        await eventually(learned, what="learned")

        code, out, _ = await learnerd(capsys, "ctl", "status", *at)
        assert code == 0
        for words in (
            "learnerd 0.1.0 — running",
            "2 blocks · 2 examples · 2 vectors",
            "controllers",
            "analyzer",
            "tombstones (learnerd forget --list)",
        ):
            assert words in out, words
        for name in ("examples", "embeddings", "probes"):
            assert name in out

        code, out, _ = await learnerd(capsys, "ctl", "status", "--json", *at)
        assert code == 0 and json.loads(out)["pid"] == os.getpid()
        assert json.loads(out)["suggestions"] == {}

        code, out, _ = await learnerd(capsys, "ctl", "pause", "examples", *at)
        assert code == 0 and "examples: paused" in out and "probes: running" in out
        assert running.daemon.controllers["examples"].paused
        code, out, err = await learnerd(capsys, "ctl", "pause", "nope", *at)
        assert code == 1 and "no controller named 'nope'" in err
        code, out, _ = await learnerd(capsys, "ctl", "resume", "--json", *at)
        assert code == 0 and json.loads(out) == {"paused": dict.fromkeys(running.daemon.controllers, False)}
        assert {"examples", "embeddings", "probes"} <= set(running.daemon.controllers)

        code, out, err = await learnerd(capsys, "ctl", "requeue", "probes", "some/doc.dlm", *at)
        assert code == 1 and "controller 'probes' has no key 'some/doc.dlm'" in err  # a typo is not queued
        block_id = next(iter(BLOCKS))
        code, out, _ = await learnerd(capsys, "ctl", "requeue", "examples", block_id, *at)
        assert code == 0 and f"requeued '{block_id}' on examples" in out

        code, out, _ = await learnerd(capsys, "ctl", "log-level", "warning", *at)
        assert code == 0 and out.startswith("warning (was ") and current_level() == "warning"
        # (--log-level: this in-process CLI call would otherwise reset the shared process's level first)
        code, out, _ = await learnerd(capsys, "ctl", "log-level", "--log-level", "warning", *at)
        assert code == 0 and out.strip() == "warning"

        code, out, _ = await learnerd(capsys, "ctl", "metrics", *at)
        assert code == 0 and 'workqueue_depth{name="examples"}' in out
        code, out, _ = await learnerd(capsys, "ctl", "metrics", "--json", *at)
        families = json.loads(out)
        depth = families["workqueue_depth"]
        assert code == 0 and depth["type"] == "gauge" and depth["help"]
        assert {"name": "workqueue_depth", "labels": {"name": "examples"}, "value": 0.0} in depth["samples"]

        code, out, err = await learnerd(capsys, "ctl", "reload", *at)
        assert code == 1 and "started without a config file" in err

        code, out, _ = await learnerd(capsys, "ctl", "backfill", "--since", "1d", "--json", *at)
        job = json.loads(out)
        assert code == 0 and job["state"] == "done" and job["blocks"] == 2 and job["changes"] == {}

        # `learnerd backfill` goes through the socket too: its answer is the daemon's job, not a local run.
        code, out, _ = await learnerd(capsys, "backfill", "--since", "1d", "--json", *at)
        assert code == 0 and json.loads(out)["id"] == job["id"] + 1

        calls = minilm.calls
        code, out, _ = await learnerd(capsys, "search", "how big is my folder", "-k", "1", "--json", *at)
        assert code == 0 and [h["answer"] for h in json.loads(out)] == ["du -sh ."]
        assert minilm.calls == calls + 1, "answered by the running daemon's embedder (no model load)"

        # an answer the endpoint served: `ctl status` shows it per document and adapter version
        answer = ServedAnswer("01KDOCUMENT", "v0003", "S", (("user", "pods?"),), "kubectl get pods", (), time.time())
        assert running.daemon.record_served(answer) is not None
        code, out, _ = await learnerd(capsys, "ctl", "status", *at)
        assert code == 0 and "suggestions (served answers)" in out
        (row,) = [line for line in out.splitlines() if "01KDOCUMENT" in line]
        assert [cell.strip() for cell in row.split("│")[1:7]] == ["01KDOCUMENT", "v0003", "1", "0", "0", "0"]

        code, out, _ = await learnerd(capsys, "ctl", "drain", *at)
        assert code == 0 and "the daemon is draining: in-flight work gets 30 s, then it exits" in out
        await eventually(lambda: _false(running.socket.exists()), what="the daemon stopped")

    code, out, err = await learnerd(capsys, "ctl", "status", *at)
    assert code == 3 and "no learnerd daemon is running" in err


async def _false(value: bool) -> bool:
    return not value


def test_ctl_without_a_daemon_says_so(short_root: Path, capsys):
    state = short_root / "state"
    code = main(["ctl", "status", "--state-dir", str(state)])
    assert code == 3
    assert f"no learnerd daemon is running on {state} (no socket at {state}/learnerd.sock)" in capsys.readouterr().err

    secure_state_dir(state)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(state / "learnerd.sock"))  # what a kill -9 leaves behind
    dead.close()
    code = main(["ctl", "pause", "--state-dir", str(state)])
    assert code == 3 and "the socket refuses connections" in capsys.readouterr().err


NOBODY = 65534


def _client_as_nobody(socket_path: Path) -> str:
    """The admin client's error message when run as uid nobody (a forked child; see test_api_admin)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                AdminClient(socket_path, timeout_s=10).call("GET", "/status")
                message = "served"
            except CommandError as exc:
                message = str(exc)
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    return message


@pytest.mark.skipif(os.getuid() != 0, reason="running the client as another user (nobody) needs root")
def test_ctl_says_when_the_socket_is_not_ours(short_root: Path):
    os.chmod(short_root, 0o711)
    state = short_root / "state"
    secure_state_dir(state)
    admin = bind_admin_socket(state / "learnerd.sock")
    try:
        message = _client_as_nobody(admin.path)
        assert message.startswith(f"permission denied reaching {admin.path}: its directory is not yours")
        os.chmod(state, 0o711)
        message = _client_as_nobody(admin.path)
        assert message == f"the socket {admin.path} is not yours: it belongs to uid 0, you are uid {NOBODY}"
    finally:
        remove_admin_socket(admin)


@pytest.mark.anyio
async def test_insecure_no_token_is_loud_in_the_log_and_in_ctl_status(short_root: Path, minilm, capsys):
    """Issue 60: ``--insecure-no-token`` (learned adapters served without the token) is a warning in the log as the
    endpoint starts, and ``ctl status`` says so beside the endpoint and among its warnings."""
    cfg = daemon_config(short_root, serve=ServeConfig(listen="127.0.0.1:0", num_threads=1))
    at = ("--state-dir", str(cfg.state_dir))
    with capture_all_logs() as logs:
        async with running_service(cfg, minilm, ServiceOptions(openai_addr=("127.0.0.1", 0), insecure_no_token=True)):
            code, out, _ = await learnerd(capsys, "ctl", "status", *at)
            _, as_json, _ = await learnerd(capsys, "ctl", "status", "--json", *at)
    assert code == 0
    assert "INSECURE: learned adapters served without the token (--insecure-no-token)" in out
    assert f"warning: {INSECURE_WARNING}" in " ".join(out.split())
    status = json.loads(as_json)
    assert status["openai_access"] == {"token": None, "without_token": "all", "insecure_no_token": True}
    assert INSECURE_WARNING in status["warnings"]
    assert [e["log_level"] for e in logs if e["event"] == INSECURE_WARNING] == ["warning"], "once at start"
