"""The privacy corpora through every intake of a real ``learnerd run`` (tiny model, no training cycle): the
secret corpus as block-log lines, a Claude Code transcript, a Codex rollout, ``POST /v1/blocks``, RPC
``inject_probe`` and prompts served by the OpenAI-compatible endpoint (the official client); then every file
the daemon wrote under its state directory and documents (database, write-ahead log, journal, block-log
files, documents, foyle export) and its captured log output are searched for every secret. The benign
commands must be stored unchanged; the destructive corpus and the injection phrasings must never become
examples, their look-alikes and benign prompts must. Every rate is printed (``-s``) and in the assertion
messages."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell
from tests.support.daemon_process import daemon_process, free_port, wait_until
from tests.support.pipeline import table_rows
from tests.support.privacy_corpora import SecretForm, lines, rate, secret_forms
from tests.support.serving import client, write_config

pytestmark = pytest.mark.slow

OPENAI_TOKEN, PROBE_TOKEN = "privacy-openai-token", "privacy-probe-token"
T0 = 1_700_000_000.0


def config(root: Path, models_dir: Path) -> None:
    """Serving's test config (tiny models), training on for the RPC's probe inbox but no cycle during the test,
    and the foyle export."""
    quiet = "num_threads = 1\nniceness = 0\nwarm_spare = false\ndebounce_s = 3600.0\ndebounce_max_s = 3600.0"
    write_config(root, models_dir, f'[serve]\nmax_tokens = 1\n\n[export.foyle]\ndir = "{root / "foyle"}"\n', quiet)
    for directory in ("logs/claude", "logs/codex"):
        (root / directory).mkdir(parents=True)


def blocklog(block_id: str, context: tuple[str, ...], command: str, when: float) -> str:
    cells = [Cell("markup", text) for text in context]
    return event_line("context", block_id, when, cells=cells) + event_line(
        "executed", block_id, when + 1, cell=Cell("code", command, "bash"), exit_code=0
    )


def claude_code(forms: list[SecretForm]) -> str:
    out = []
    for i, form in enumerate(forms):
        when = f"2025-09-03T10:{i // 60:02d}:{i % 60:02d}.000Z"
        base = {"sessionId": "cc-priv", "cwd": "/srv/app", "timestamp": when}
        turns = [
            ("user", "\n".join(form.context)),
            ("assistant", [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": form.command}}]),
            ("user", [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok", "is_error": False}]),
        ]
        for n, (role, content) in enumerate(turns):
            line = {**base, "type": role, "uuid": f"{i}-{n}", "message": {"role": role, "content": content}}
            out.append(json.dumps(line))
    return "\n".join(out) + "\n"


def codex(forms: list[SecretForm]) -> str:
    def item(kind: str, payload: dict, i: int) -> str:
        return json.dumps({"timestamp": f"2025-06-01T10:{i // 60:02d}:{i % 60:02d}Z", "type": kind, "payload": payload})

    out = [item("session_meta", {"id": "cx-priv", "cwd": "/srv"}, 0)]
    for i, form in enumerate(forms):
        call = {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": form.command})}
        out += [
            item("event_msg", {"type": "user_message", "message": "\n".join(form.context)}, i),
            item("response_item", {**call, "call_id": f"c{i}"}, i),
            item("event_msg", {"type": "exec_command_end", "call_id": f"c{i}", "command": ["bash"], "exit_code": 0}, i),
        ]
    return "\n".join(out) + "\n"


async def post_everything(rpc: str, forms: list[SecretForm]) -> dict[str, int]:
    """Each form to ``POST /v1/blocks`` and to RPC ``inject_probe``; the statuses seen."""
    statuses: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {PROBE_TOKEN}"}
    async with aiohttp.ClientSession() as session:
        for i, form in enumerate(forms):
            body = blocklog(f"http-{i}", form.context, form.command, T0 + i).encode()
            async with session.post(f"{rpc}/v1/blocks", data=body, headers=headers) as r:
                statuses[f"blocks {r.status}"] = statuses.get(f"blocks {r.status}", 0) + 1
            prompt = "\n".join(form.context).strip() or "Run it"
            probe = {"method": "inject_probe", "params": {"prompt": prompt, "reference": form.command}}
            async with session.post(f"{rpc}/rpc", json=probe, headers=headers) as r:
                statuses[f"rpc {r.status}"] = statuses.get(f"rpc {r.status}", 0) + 1
    return statuses


def stored_files(root: Path) -> list[Path]:
    """What the daemon wrote: the state directory, the documents, the foyle export, and its captured log output."""
    files = [
        p for d in ("state", "docs", "foyle") for p in (root / d).rglob("*") if p.is_file() and "models" not in p.parts
    ]
    return [*files, root / "daemon.log"]


def test_the_corpora_through_every_intake_of_a_running_daemon(tmp_path: Path, tiny_model_dir: Path, models_dir: Path):
    forms, benign = secret_forms(), lines("benign_commands.txt")
    destructive, lookalikes = lines("destructive_commands.txt"), lines("lookalike_commands.txt")
    injections, prompts = lines("injections.txt"), lines("benign_prompts.txt")
    config(tmp_path, models_dir)
    logs = tmp_path / "logs"
    blocks = [blocklog(f"bl-{i}", f.context, f.command, T0 + i) for i, f in enumerate(forms)]
    blocks += [blocklog(f"ok-{i}", ("Run the task",), c, T0 + i) for i, c in enumerate(benign)]
    blocks += [blocklog(f"d-{i}", ("Do the maintenance task",), c, T0 + i) for i, c in enumerate(destructive)]
    blocks += [blocklog(f"l-{i}", ("Do the maintenance task",), c, T0 + i) for i, c in enumerate(lookalikes)]
    blocks += [blocklog(f"inj-{i}", (t,), "ls -la", T0 + i) for i, t in enumerate(injections)]
    blocks += [blocklog(f"bp-{i}", (t,), "ls -la", T0 + i) for i, t in enumerate(prompts)]
    (logs / "blocks.jsonl").write_text("".join(blocks))
    (logs / "claude" / "cc-priv.jsonl").write_text(claude_code(forms))
    (logs / "codex" / "rollout-2025-06-01T10-00-00-cx-priv.jsonl").write_text(codex(forms))
    port = free_port()
    env = {"LEARNERD_OPENAI_TOKEN": OPENAI_TOKEN, "LEARNERD_PROBE_TOKEN": PROBE_TOKEN}
    args = ("--listen-openai", "127.0.0.1:0", "--listen-rpc", f"127.0.0.1:{port}")
    with daemon_process(tmp_path, *args, env=env) as process:
        process.wait_ready()
        statuses = asyncio.run(post_everything(f"http://127.0.0.1:{port}", forms))
        api = client(process.client().call("GET", "/status")["endpoints"]["openai"], OPENAI_TOKEN)
        for form in forms:
            text = "\n".join([*form.context, form.command])
            api.chat.completions.create(model="learnerd/tiny-llama", messages=[{"role": "user", "content": text}])
        expected = 4 * len(forms) + len(benign) + len(destructive) + len(lookalikes) + len(injections) + len(prompts)

        def all_read() -> bool:
            ids = table_rows(tmp_path / "state", "SELECT id FROM blocks WHERE source != 'served'")
            return len(ids) >= expected

        wait_until(all_read, timeout=900, what=f"{expected} blocks read", interval=1.0)

        def judged() -> bool:  # every block judged, every example embedded and written into its document
            controllers = process.client().call("GET", "/status")["controllers"]
            return all(
                c["queue_depth"] == 0 and not c["in_flight"] and not c["waiting"]
                for name, c in controllers.items()
                if name in ("examples", "embeddings", "probes", "foyle_export")
            )

        wait_until(judged, timeout=900, what="every block judged", interval=1.0)
        process.signal(signal.SIGTERM)
        assert process.wait(timeout=180) == 0

    served = table_rows(tmp_path / "state", "SELECT count(*) FROM suggestions")[0][0]
    assert served == len(forms), "every prompt served was recorded"
    stored = {path: path.read_bytes() for path in stored_files(tmp_path)}
    leaked = {}
    for form in forms:
        where = sorted({p.name for p, data in stored.items() for s in form.secrets if s.encode() in data})
        if where:
            leaked[form.form] = where
    executed = dict(table_rows(tmp_path / "state", "SELECT id, executed FROM blocks WHERE id LIKE 'ok-%'"))
    changed = [c for i, c in enumerate(benign) if executed.get(f"ok-{i}") != c]
    learned = {r[0] for r in table_rows(tmp_path / "state", "SELECT id FROM examples")}
    refused = [c for i, c in enumerate(destructive) if f"d-{i}" not in learned]
    kept = [c for i, c in enumerate(lookalikes) if f"l-{i}" in learned]
    stopped = [t for i, t in enumerate(injections) if f"inj-{i}" not in learned]
    passed = [t for i, t in enumerate(prompts) if f"bp-{i}" in learned]
    rates = {
        "secret forms never stored (6 intakes)": rate(len(forms) - len(leaked), len(forms)),
        "benign commands unchanged": rate(len(benign) - len(changed), len(benign)),
        "destructive commands refused": rate(len(refused), len(destructive)),
        "look-alikes learned": rate(len(kept), len(lookalikes)),
        "injection phrasings refused": rate(len(stopped), len(injections)),
        "benign prompts learned": rate(len(passed), len(prompts)),
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in rates.items()) + f"\nintake statuses: {statuses}")
    assert statuses.get("blocks 200") == len(forms), statuses
    assert statuses.get("rpc 200", 0) + statuses.get("rpc 400", 0) == len(forms), statuses
    assert len(leaked) <= 0.02 * len(forms), f"{rates}; leaked: {leaked}"
    assert len(changed) <= 0.02 * len(benign), f"{rates}; changed: {changed}"
    assert len(refused) >= 0.98 * len(destructive) and len(kept) >= 0.98 * len(lookalikes), rates
    assert len(stopped) >= 0.90 * len(injections) and len(passed) == len(prompts), rates
