"""The daemon and the answers it served: ``run --once`` removes the suggestions past ``[suggestions]
retention_days`` (with their blocks that never ran), and joins a logged execution to the answer it ran, whose
block then becomes an example of the person's prompt."""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from learnerd.analyzer.blocklog import event_line
from learnerd.daemon.app import Daemon
from learnerd.store import db
from learnerd.store.blocks import Cell, get_block
from learnerd.store.examples import get_example
from learnerd.store.settings import SuggestionsConfig
from learnerd.store.state_dir import secure_state_dir
from learnerd.store.suggestions import ServedAnswer, counts, get_suggestion, record
from tests.support.daemon import daemon_config

DAY_S = 86400.0


def served(at: float, session: str) -> ServedAnswer:
    return ServedAnswer("doc", "v0001", session, (("user", "list the pods in dev"),), "kubectl get pods -n dev", (), at)


def test_run_once_prunes_expired_suggestions_and_an_execution_makes_the_answer_an_example(tmp_path: Path, minilm):
    cfg = daemon_config(tmp_path, suggestions=SuggestionsConfig(retention_days=1.0, join_window_s=600.0))
    now = time.time()
    secure_state_dir(cfg.layout.root)
    conn = db.connect(cfg.layout.store_target)
    with db.transaction(conn):
        expired = record(conn, served(now - 2 * DAY_S, "old"), now - 2 * DAY_S)
        recent = record(conn, served(now - 60, "S"), now - 60)
    conn.close()
    ran = Cell("code", "kubectl get pods -n dev", "bash")
    (tmp_path / "logs" / "shell.jsonl").write_text(
        event_line("executed", "sh-1", now - 30, cell=ran, exit_code=0, session="S")
    )

    daemon = Daemon(cfg, embedder=minilm)
    try:
        anyio.run(daemon.run_once)
        assert get_suggestion(daemon.conn, expired) is None and get_block(daemon.conn, expired) is None
        assert get_suggestion(daemon.conn, recent).outcome == "accepted"
        example = get_example(daemon.conn, recent)
        assert (example.query, example.answer) == ("list the pods in dev", "kubectl get pods -n dev")
        assert counts(daemon.conn)["doc"]["v0001"] == {"served": 2, "accepted": 1, "edited": 0, "failed": 0}
    finally:
        daemon.close()
