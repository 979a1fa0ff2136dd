"""A served answer is redacted before its first write: the prompt, the answer and the session hold no secret in
the store, and the suggested command stays comparable with an execution redacted the same way."""

from __future__ import annotations

from collections import Counter

from learnerd.privacy.redact import Redactor
from learnerd.sources.served_answers import record_answer
from learnerd.store import db
from learnerd.store.blocks import get_block
from learnerd.store.suggestions import ServedAnswer, get_suggestion

SECRET = "AKIAIOSFODNN7EXAMPLE"


def test_the_prompt_the_answer_and_the_session_are_redacted_before_they_are_stored(tmp_path):
    conn = db.connect(tmp_path / "learnerd.db")
    answer = ServedAnswer(
        document="doc",
        version="v0001",
        session=f"s-{SECRET}",
        turns=(("user", f"use my key {SECRET} to list buckets"),),
        answer=f"```bash\nAWS_ACCESS_KEY_ID={SECRET} aws s3 ls\n```",
        retrieved=(),
        served_at=1_800_000_000.0,
    )
    kinds: Counter[str] = Counter()
    block_id = record_answer(conn, answer, Redactor(), now=1_800_000_000.0, kinds=kinds)
    stored = [tuple(r) for r in conn.execute("SELECT * FROM blocks")]
    stored += [tuple(r) for r in conn.execute("SELECT * FROM suggestions")]
    assert SECRET not in repr(stored)
    assert sum(kinds.values()) >= 3
    suggestion = get_suggestion(conn, block_id)
    assert suggestion.command == "AWS_ACCESS_KEY_ID=<AWS_ACCESS_KEY_ID> aws s3 ls"
    assert get_block(conn, block_id).session == suggestion.session != answer.session
