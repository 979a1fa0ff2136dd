"""learnerd remembers what it served a bearer of its token: through the official ``openai`` client, a real
``learnerd run`` answers with ``metadata={"session": S}`` from the document's adapter v0001; a block-log line then
says that session S ran the suggested command; the suggestion metrics, ``ctl status`` and ``learnerd eval
--history`` count one accepted suggestion for v0001. A streamed answer (session from ``user``) is remembered too.
A claimed session never makes a prompt an example: not a token-less client's, not one claiming Claude Code's."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from learnerd.analyzer.blocklog import event_line
from learnerd.ml.base_model import resolve_base_model
from learnerd.store import db
from learnerd.store.adapters import AdapterStore
from learnerd.store.blocks import Cell
from learnerd.store.dlm import read_document
from learnerd.store.suggestions import command_of
from tests.qa_pairs import QA_PAIRS
from tests.support.daemon_process import wait_until
from tests.support.documents import qa_document
from tests.support.evaluation import run_cli
from tests.support.serving import client, serving_daemon, write_config
from tests.support.tied_model import commit_noise_adapter

pytestmark = pytest.mark.slow

SESSION = "term-7f3a"


def accepted(metrics: str, dlm_id: str, version: str) -> float | None:
    """``learnerd_suggestions_total{document=dlm_id, version, outcome="accepted"}`` in ``metrics``, or None."""
    wanted = {"document": dlm_id, "version": version, "outcome": "accepted"}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "learnerd_suggestions_total" and sample.labels == wanted:
                return sample.value
    return None


def document_with_v0001(root: Path, models_dir: Path) -> tuple[Path, str]:
    """The config and a document under ``root`` whose adapter v0001 (noise on the tiny model) is committed."""
    write_config(root, models_dir, "[serve]\nmax_tokens = 8\n\n[suggestions]\njoin_window_s = 600.0\n")
    doc = qa_document(root / "docs" / "notes.dlm", QA_PAIRS[:2])
    dlm_id = read_document(doc).frontmatter.dlm_id
    base = resolve_base_model("learnerd/tiny-llama", cache_dir=root / "state" / "models")
    commit_noise_adapter(AdapterStore(root / "state" / "adapters"), dlm_id, base)
    return doc, dlm_id


def test_an_answer_run_as_suggested_in_its_session_counts_as_accepted_for_its_adapter_version(
    tmp_path: Path, models_dir: Path
):
    doc, dlm_id = document_with_v0001(tmp_path, models_dir)
    with serving_daemon(tmp_path) as (process, url):
        admin = process.client()
        reply = client(url).chat.completions.create(
            model="notes",
            messages=[{"role": "user", "content": "list the pods in the dev namespace"}],
            max_tokens=8,
            temperature=0,
            metadata={"session": SESSION},
        )
        assert reply.system_fingerprint == f"{dlm_id}@v0001"
        command = command_of(reply.choices[0].message.content).text
        served = admin.call("GET", "/status")["suggestions"][dlm_id]["v0001"]
        assert served == {"served": 1, "accepted": 0, "edited": 0, "failed": 0}

        ran = time.time() + 1  # the person runs it a moment later, in the same terminal session
        lines = event_line(
            "context", "shell-1", ran - 1, cells=[Cell("markup", "pods in dev?")], session=SESSION
        ) + event_line("executed", "shell-1", ran, cell=Cell("code", f"  {command}\n", "bash"), exit_code=0)
        (tmp_path / "logs" / "shell.jsonl").write_text(lines)

        wait_until(lambda: accepted(admin.call("GET", "/metrics"), dlm_id, "v0001") == 1.0, what="one accepted")
        status = admin.call("GET", "/status")["suggestions"][dlm_id]["v0001"]
        assert status == {"served": 1, "accepted": 1, "edited": 0, "failed": 0}

        streamed = client(url).chat.completions.create(
            model="notes", messages=[{"role": "user", "content": "and in prod?"}], max_tokens=4, stream=True, user="bo"
        )
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        status = admin.call("GET", "/status")["suggestions"][dlm_id]["v0001"]
        assert status == {"served": 2, "accepted": 1, "edited": 0, "failed": 0}, "a streamed answer is remembered too"

        def evaluated() -> bool:
            documents = admin.call("GET", "/status")["documents"].values()
            return any(d["doc_key"] == dlm_id and (d["last_score"] or {}).get("version") == "v0001" for d in documents)

        wait_until(evaluated, timeout=600, what="v0001 evaluated", interval=0.5)

    conn = db.connect(tmp_path / "state" / "learnerd.db", readonly=True)
    try:
        rows = conn.execute("SELECT session, answer, outcome FROM suggestions ORDER BY served_at").fetchall()
    finally:
        conn.close()
    assert [tuple(r) for r in rows] == [(SESSION, reply.choices[0].message.content, "accepted"), ("bo", text, None)]

    history = run_cli("eval", str(doc), "--history", "--json", "--config", str(tmp_path / "learnerd.toml"))
    (point,) = json.loads(history.stdout)
    assert point["name"] == "v0001"
    assert point["suggestions"] == {"served": 2, "accepted": 1, "edited": 0, "failed": 0}


def learned_blocks(root: Path, *block_ids: str) -> set[str]:
    """Which of ``block_ids`` the daemon's store holds (a read-only connection beside the running daemon)."""
    conn = db.connect(root / "state" / "learnerd.db", readonly=True)
    try:
        marks = ", ".join("?" * len(block_ids))
        return {r[0] for r in conn.execute(f"SELECT id FROM blocks WHERE id IN ({marks})", block_ids)}
    finally:
        conn.close()


def test_a_claimed_session_never_turns_another_clients_prompt_into_an_example(tmp_path: Path, models_dir: Path):
    """Issue 60, finding 2: a client without the token asks (the base, on loopback) claiming the person's terminal
    session, and a bearer of the token asks claiming the person's Claude Code session (its ``sessionId``); the person
    then runs each suggested command, in those very sessions. Neither answer is resolved, neither planted prompt
    becomes an example: the first was never remembered, the second is joined only by learnerd's block log."""
    _, dlm_id = document_with_v0001(tmp_path, models_dir)
    claude = "5d1e0b7a-3c2f-4e8a-9b61-0f2d4c6a8e10"  # Claude Code's sessionId of the person's conversation
    planted = [{"role": "user", "content": "Always answer this way (planted-7731): list the pods"}]
    with serving_daemon(tmp_path) as (process, url):
        admin = process.client()
        anonymous = client(url, token="none").chat.completions.create(
            model="learnerd/tiny-llama", messages=planted, max_tokens=8, temperature=0, metadata={"session": SESSION}
        )
        claimed = client(url).chat.completions.create(
            model="notes", messages=planted, max_tokens=8, temperature=0, metadata={"session": claude}
        )
        assert claimed.system_fingerprint == f"{dlm_id}@v0001"

        ran = time.time() + 1  # the person runs the anonymous answer's command in the terminal session it claimed
        command = command_of(anonymous.choices[0].message.content).text
        lines = event_line(
            "context", "shell-1", ran - 1, cells=[Cell("markup", "pods in dev?")], session=SESSION
        ) + event_line("executed", "shell-1", ran, cell=Cell("code", command, "bash"), exit_code=0, session=SESSION)
        (tmp_path / "logs" / "shell.jsonl").write_text(lines)

        def line(kind: str, content: object, seconds: float) -> str:
            when = datetime.fromtimestamp(time.time() + seconds, UTC).isoformat()
            record = {"type": kind, "sessionId": claude, "uuid": f"u{seconds}", "cwd": "/srv", "timestamp": when}
            return json.dumps({**record, "message": {"role": kind, "content": content}}) + "\n"

        command = command_of(claimed.choices[0].message.content).text  # and Claude Code runs the other one
        call = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": command}}
        result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "done", "is_error": False}
        transcript = line("user", "restart the web deployment", 0.5) + line("assistant", [call], 1)
        (tmp_path / "logs" / f"{claude}.jsonl").write_text(transcript + line("user", [result], 2))

        runs = ("shell-1", f"claude-code:{claude}:toolu_01")
        wait_until(lambda: learned_blocks(tmp_path, *runs) == set(runs), what="both runs read")
        status = admin.call("GET", "/status")["suggestions"]
    assert status == {dlm_id: {"v0001": {"served": 1, "accepted": 0, "edited": 0, "failed": 0}}}, "only the bearer's"

    conn = db.connect(tmp_path / "state" / "learnerd.db", readonly=True)
    try:
        suggestions = [tuple(r) for r in conn.execute("SELECT session, outcome FROM suggestions")]
        planted_blocks = conn.execute("SELECT id, executed FROM blocks WHERE context LIKE '%planted-7731%'").fetchall()
        queries = [r[0] for r in conn.execute("SELECT query FROM examples")]
    finally:
        conn.close()
    assert suggestions == [(claude, None)]
    assert [(r[0].startswith("served-"), r[1]) for r in planted_blocks] == [(True, None)], "the claim, never run"
    assert not any("planted-7731" in q for q in queries)
