"""A new user's first runs: an unreachable embeddings endpoint fails at once, dropped work is a non-zero exit,
a run with nothing to embed never loads MiniLM, and ``search`` says which path it takes and waits for a
starting daemon (issue: what a new user found, items 7 and 8)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from learnerd.cmd._client import AdminClient, DaemonStarting
from learnerd.cmd.search import search_daemon
from tests.conftest import REPO_ROOT
from tests.support.daemon_process import free_port
from tests.support.openai_server import fake_vector, serve_routes
from tests.support.pipeline import run_cli

EXAMPLE_LOGS = REPO_ROOT / "examples" / "logs"


def write_config(tmp_path: Path, embeddings: str, extra: str = "") -> Path:
    logs = tmp_path / "logs"
    shutil.copytree(EXAMPLE_LOGS, logs)
    config = tmp_path / "learnerd.toml"
    config.write_text(
        f'state_dir = "state"\nlog_dirs = ["logs"]\ndocs_dirs = ["docs"]\n\n[embeddings]\n{embeddings}\n{extra}'
    )
    return config


def test_an_unreachable_embeddings_endpoint_fails_at_start(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config = write_config(tmp_path, f'backend = "openai"\nmodel = "foyle-embed"\nbase_url = "{url}"')
    proc = run_cli("run", "--once", "--no-train", "--config", str(config), check=False, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("learnerd run: error:") and url in last and "[embeddings]" in last
    assert not (tmp_path / "state" / "learnerd.db").exists() or "vectors" not in proc.stdout


def test_run_once_exits_non_zero_when_work_was_dropped(tmp_path: Path) -> None:
    calls = {"n": 0}

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        calls["n"] += 1
        if calls["n"] > 1:  # the start-up check passes; every later batch fails
            return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=400)
        data = [{"object": "embedding", "index": 0, "embedding": fake_vector(body["input"][0], 8)}]
        return web.json_response({"object": "list", "data": data, "model": body["model"], "usage": {}})

    with serve_routes([web.post("/v1/embeddings", embeddings)]) as url:
        config = write_config(
            tmp_path,
            f'backend = "openai"\nmodel = "m"\nbase_url = "{url}"',
            "[controllers.embeddings]\nmax_retries = 2\n",
        )
        proc = run_cli("run", "--once", "--no-train", "--json", "--config", str(config), check=False, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["vectors"] == 0 and summary["examples"] > 0
    assert "work dropped after repeated failures" in proc.stderr and "embeddings" in proc.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_run_with_nothing_to_embed_never_loads_minilm(tmp_path: Path) -> None:
    config = write_config(tmp_path, 'backend = "minilm"')
    first = run_cli("run", "--once", "--no-train", "--log-level", "info", "--config", str(config))
    assert "loading embedder" in first.stderr, "the first run embeds, so it loads the model"
    second = run_cli("run", "--once", "--no-train", "--json", "--log-level", "info", "--config", str(config))
    assert json.loads(second.stdout)["embedder_calls"] == 0
    assert "loading embedder" not in second.stderr


@contextmanager
def starting_daemon_socket(path: Path, not_ready: int) -> Iterator[list[str]]:
    """A real aiohttp server on the Unix socket ``path`` answering ``POST /search`` with 503 ``not_ready``
    times (a daemon loading its embedder), then with one hit; yields the log of statuses sent."""
    sent: list[str] = []
    loop = asyncio.new_event_loop()
    state: dict = {}

    async def search(request: web.Request) -> web.Response:
        if len(sent) < not_ready:
            sent.append("503")
            return web.json_response({"error": "the embedder is still loading; retry in a few seconds"}, status=503)
        sent.append("200")
        hit = {"id": "b1", "query": "list pods", "answer": "kubectl get pods", "language": "bash", "score": 0.9}
        return web.json_response([hit])

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/search", search)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.UnixSite(runner, str(path)).start()
        state["runner"] = runner

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield sent
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_search_waits_for_a_starting_daemon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = tmp_path / "learnerd.sock"
    with starting_daemon_socket(sock, not_ready=3) as sent:
        hits = search_daemon(AdminClient(sock), "which pods", 1, wait_s=30, poll_s=0.05)
    assert sent == ["503", "503", "503", "200"]
    assert hits[0]["answer"] == "kubectl get pods"
    assert capsys.readouterr().err.count("the daemon is starting") == 1


def test_search_gives_up_on_a_daemon_that_never_gets_ready(tmp_path: Path) -> None:
    sock = tmp_path / "learnerd.sock"
    with starting_daemon_socket(sock, not_ready=10**6), pytest.raises(DaemonStarting, match="HTTP 503"):
        search_daemon(AdminClient(sock), "which pods", 1, wait_s=0.2, poll_s=0.05)


def test_offline_search_says_so(tmp_path: Path) -> None:
    proc = run_cli("search", "--state-dir", str(tmp_path / "nothing"), "which pods", check=False, timeout=120)
    assert "no daemon on" in proc.stderr and "searching offline" in proc.stderr
    assert proc.returncode == 1 and "run `learnerd run` first" in proc.stderr
