"""``POST /v1/blocks`` on a real ``learnerd run --listen-rpc``: the token, the all-or-nothing 400 naming the bad
event, and every integration of docs/integrations.md — the bare curl call, the Python client (sync and async),
the IPython extension in a real ``InteractiveShell``, the bash and zsh hook — ends as an example that search
finds. The daemon and the integrations take the token from the token file in the config directory (where
``learnerd init`` writes it: ``$XDG_CONFIG_HOME/learnerd/token``), none from the environment."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import anyio
import pytest

from learnerd.client import AsyncLearnerdClient, LearnerdClient, LearnerdError
from tests.conftest import cli_env
from tests.support.daemon import short_tmp_dir
from tests.support.daemon_process import DaemonProcess, daemon_process, free_port, wait_until
from tests.support.manual import doc_block

TOKEN = "blocks-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LEARNED_WITHIN_S = 30.0
CONFIG = """\
state_dir = "state"
log_dirs = ["logs"]

[analyzer]
poll_interval_s = 0.2

[shutdown]
drain_timeout_s = 60.0

[training]          # on, as --listen-rpc needs, but no cycle starts during the tests
debounce_s = 600.0
debounce_max_s = 600.0
num_threads = 1
niceness = 0
warm_spare = false
"""


@dataclass
class Served:
    process: DaemonProcess
    root: Path
    url: str

    @property
    def config_home(self) -> str:
        """``$XDG_CONFIG_HOME`` of the integrations: ``root`` is its ``learnerd`` directory, with the token file."""
        return str(self.root.parent)

    @property
    def env(self) -> dict[str, str]:
        return cli_env(LEARNERD_RPC_URL=self.url, XDG_CONFIG_HOME=self.config_home)

    def search(self, text: str) -> list[dict]:
        return self.process.client().call("POST", "/search", {"text": text, "k": 10})

    def wait_learned(self, query: str, answer: str) -> dict:
        """Poll search until an example answers ``answer`` for ``query``; return that hit."""
        found: list[dict] = []

        def learned() -> bool:
            found[:] = [hit for hit in self.search(query) if hit["answer"] == answer]
            return bool(found)

        wait_until(learned, timeout=LEARNED_WITHIN_S, what=f"an example {answer!r} for {query!r}", interval=0.25)
        return found[0]

    def block(self, where: str, *args: object) -> tuple | None:
        conn = sqlite3.connect(self.root / "state" / "learnerd.db")
        try:
            return conn.execute(f"SELECT id, executed, exit_code FROM blocks WHERE {where}", args).fetchone()
        finally:
            conn.close()

    def ingested_text(self) -> str:
        """Everything the daemon wrote into its ingest directory."""
        return "".join(p.read_text() for p in sorted((self.root / "state" / "ingest").glob("*.jsonl")))

    def metric(self, outcome: str) -> float:
        text = self.process.client().call("GET", "/metrics")
        match = re.search(rf'^learnerd_rpc_block_requests_total{{outcome="{outcome}"}} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with short_tmp_dir() as top:
        root = top / "learnerd"  # the config directory
        (root / "logs").mkdir(parents=True)
        (root / "learnerd.toml").write_text(CONFIG)
        token = root / "token"  # as learnerd init writes it: the daemon reads it beside its config
        token.write_text(f"{TOKEN}\n")
        token.chmod(0o600)
        address = f"127.0.0.1:{free_port()}"
        with daemon_process(root, "--listen-rpc", address) as process:
            process.wait_ready()
            yield Served(process, root, f"http://{address}")


def events(block_id: str, intent: str, command: str, exit_code: int | None = 0) -> list[dict]:
    return [
        {"learnerd": 1, "type": "context", "block_id": block_id, "time": 1714564800.0,
         "cells": [{"kind": "markup", "text": intent}]},
        {"learnerd": 1, "type": "executed", "block_id": block_id, "time": 1714564801.0,
         "cell": {"kind": "code", "language": "bash", "text": command}, "exit_code": exit_code},
    ]  # fmt: skip


def post(served: Served, body: bytes | list[dict], headers: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``POST /v1/blocks`` with a real aiohttp client (in its own event loop: the admin client runs its own);
    ``(status, JSON answer, WWW-Authenticate)``."""

    async def send() -> tuple[int, dict, str]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.post(served.url + "/v1/blocks", data=data, headers=headers or AUTH) as response,
        ):
            return response.status, await response.json(), response.headers.get("WWW-Authenticate", "")

    return anyio.run(send)


def test_without_the_token_it_is_401_and_nothing_is_written(served: Served):
    body = events("blk-no-token", "Show the uptime of the machine", "uptime")
    before = served.metric("unauthorized")
    for headers in ({"X": "no token"}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
        status, answer, challenge = post(served, body, headers)
        assert (status, challenge) == (401, "Bearer") and "bearer token" in answer["error"]
    assert "blk-no-token" not in served.ingested_text()
    assert served.metric("unauthorized") == before + 3


def test_a_logged_block_becomes_an_example_that_search_finds(served: Served):
    intent, command = "Find the ten largest files under the current directory", "du -ah . | sort -rh | head -n 10"
    status, answer, _ = post(served, events("blk-largest", intent, command))
    assert (status, answer) == (200, {"accepted": 2, "block_ids": ["blk-largest"]})
    assert '"block_id":"blk-largest"' in served.ingested_text(), "durable before the 200"
    hit = served.wait_learned(intent, command)
    assert hit["id"] == "blk-largest" and hit["query"] == intent


def test_a_bad_event_is_400_naming_its_index_and_nothing_of_its_request_is_stored(served: Served):
    bad = events("blk-refused", "Show the kernel ring buffer", "dmesg | tail")
    del bad[1]["exit_code"]
    body = b"\n".join(json.dumps(e).encode() for e in [*events("blk-refused-2", "Say hello", "echo hello"), *bad])
    before = served.metric("invalid")
    status, answer, _ = post(served, body)
    assert status == 400
    assert answer["index"] == 3 and answer["error"].startswith("event 3: ") and "exit_code" in answer["error"]
    assert "blk-refused" not in served.ingested_text()
    # a good request after it: once the analyzer has read that one, it has read all there is before it
    assert post(served, events("blk-after", "Say goodbye", "echo bye"))[0] == 200
    wait_until(lambda: served.block("id = ?", "blk-after") is not None, timeout=LEARNED_WITHIN_S, what="blk-after")
    assert served.block("id LIKE 'blk-refused%'") is None
    assert served.metric("invalid") == before + 1


def test_the_bare_curl_call_of_the_docs(served: Served):
    proc = subprocess.run(
        ["bash", "-c", doc_block("curl")], env=served.env, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(proc.stdout) == {"accepted": 2, "block_ids": ["b-7f3a"]}
    hit = served.wait_learned("List the pods in the dev namespace", "kubectl get pods -n dev")
    assert hit["query"] == "# Kubernetes\nList the pods in the dev namespace", "the heading is part of the query"


def test_the_python_call_of_the_docs(served: Served, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", served.config_home)
    exec(doc_block("python").replace("http://127.0.0.1:7429", served.url), {})
    hit = served.wait_learned("Show the last hour of logs of the web deployment", "kubectl logs deploy/web --since=1h")
    assert hit["query"] == "# Kubernetes\nShow the last hour of logs of the web deployment"


def test_the_client_logs_blocks_sync_and_async(served: Served):
    with LearnerdClient(rpc_url=served.url, probe_token=TOKEN) as client:
        sync = client.log_block(
            "tar -xzf archive.tar.gz", exit_code=0, context=["# Archives", "Unpack a gzipped tarball"], language="bash"
        )
    with (
        LearnerdClient(rpc_url=served.url, probe_token="wrong-token-0123456789") as client,
        pytest.raises(LearnerdError) as refused,
    ):
        client.log_events(events("blk-wrong-token", "Say hi", "echo hi"))
    assert refused.value.status == 401

    async def log_async() -> dict:
        async with AsyncLearnerdClient(rpc_url=served.url, probe_token=TOKEN) as client:
            return await client.log_events(events("blk-async", "Show the free disk space per mount", "df -h"))

    assert sync["accepted"] == 2 and len(sync["block_ids"]) == 1
    assert anyio.run(log_async) == {"accepted": 2, "block_ids": ["blk-async"]}
    assert served.wait_learned("Unpack a gzipped tarball", "tar -xzf archive.tar.gz")["id"] == sync["block_ids"][0]
    assert served.wait_learned("Show the free disk space per mount", "df -h")["id"] == "blk-async"


def test_the_ipython_extension_logs_each_cell_and_a_successful_one_becomes_an_example(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("LEARNERD_RPC_URL", served.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", served.config_home)
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "learnerd.integrations.ipython")
        counted = shell.run_cell(
            "# Count the words of a sentence\nlen('the quick brown fox'.split())", store_history=True
        )
        failed = shell.run_cell("# Divide a number by zero\n1 / 0", store_history=True)
        shell.run_line_magic("unload_ext", "learnerd.integrations.ipython")
        shell.run_cell("# Not logged any more\nx = 1", store_history=True)
    finally:
        InteractiveShell.clear_instance()
    assert counted.result == 4 and not failed.success
    served.wait_learned("Count the words of a sentence", "len('the quick brown fox'.split())")
    wait_until(lambda: served.block("executed = ?", "1 / 0") is not None, timeout=LEARNED_WITHIN_S, what="1 / 0")
    (block_id, _, exit_code) = served.block("executed = ?", "1 / 0")
    assert block_id.startswith("block-") and exit_code == 1, "a cell that raised is logged as failed: never learned"
    assert "Not logged any more" not in served.ingested_text()


BASH_PROMPT = 'eval "$PROMPT_COMMAND"'
SHELLS = {
    # bash: no -i; a script on stdin with history on, and the prompt's hook run where a prompt would be shown
    # (HISTIGNORE keeps those lines out of the history, as a real prompt is)
    "bash": (["bash", "--norc", "--noprofile", "-s"], ["set -o history", "HISTIGNORE='eval*'", "{hook}"], BASH_PROMPT),
    # zsh keeps no history unless interactive: -i, reading the lines from stdin, runs precmd before each prompt
    "zsh": (["zsh", "-f", "-i"], ["source {hook_file}"], None),
}  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_hook_logs_the_commands_after_an_intent_until_one_succeeds(
    served: Served, shell: str, tmp_path: Path
):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    argv, setup, prompt = SHELLS[shell]
    hook_file = tmp_path / "hook.sh"
    hook_file.write_text(doc_block("shell-hook") + "\n")
    intent, ran = f"Print the operating system name from {shell}", f"uname -s  # {shell}"
    typed = [f"# {intent}", "uname --no-such-option", ran, f"echo never-logged-{shell}", "", "exit"]
    lines = [line.format(hook=hook_file.read_text(), hook_file=hook_file) for line in setup]
    for line in typed:
        lines += [line, prompt] if prompt else [line]
    proc = subprocess.run(
        argv,
        input="\n".join(lines) + "\n",
        env={**served.env, "HISTSIZE": "100"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "learnerd: not logged" not in proc.stderr, proc.stderr
    hit = served.wait_learned(intent, ran)
    assert hit["id"].startswith("sh-") and hit["query"] == intent
    logged = [json.loads(line) for line in served.ingested_text().splitlines() if hit["id"] in line]
    executed = [(e["cell"]["text"], e["exit_code"], e["cell"]["language"]) for e in logged if e["type"] == "executed"]
    assert executed == [("uname --no-such-option", 1, shell), (ran, 0, shell)], "each attempt, one block"
    assert f"never-logged-{shell}" not in served.ingested_text()
