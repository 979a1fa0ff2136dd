"""``learnerd generate --session S`` remembers its answer like the endpoint: a suggestion of the version that
answered, in session S, with the answer printed."""

from __future__ import annotations

from pathlib import Path

from learnerd.store import db
from learnerd.store.suggestions import command_of, counts, normalize_command
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import DLM_ID, qa_document, run_cli, state_with_models


def test_generate_records_its_answer_as_a_suggestion_of_the_base_in_the_session(tmp_path: Path, models_dir: Path):
    state = state_with_models(tmp_path, models_dir)
    doc = tmp_path / "notes.dlm"
    doc.write_text(qa_document(QA_PAIRS[:1], epochs=1))
    answer = run_cli("generate", str(doc), "list the pods", "--session", "term-9", "--max-new-tokens", "4",
                     "--state-dir", str(state)).stdout  # fmt: skip
    conn = db.connect(state / "learnerd.db", readonly=True)
    try:
        (row,) = conn.execute("SELECT document, version, session, answer, command FROM suggestions").fetchall()
        assert tuple(row)[:3] == (DLM_ID, "base", "term-9")
        assert row["answer"] == answer.removesuffix("\n")
        assert row["command"] == normalize_command(command_of(row["answer"]).text)
        assert counts(conn)[DLM_ID]["base"]["served"] == 1
    finally:
        conn.close()
