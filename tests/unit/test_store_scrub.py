"""``learnerd db scrub`` over the answers learnerd served: a suggestion stored with a secret (before a
``[privacy]`` pattern knew it) loses it in its answer, command and session, and its served block too."""

from __future__ import annotations

from learnerd.privacy.redact import Redactor
from learnerd.store import db
from learnerd.store.blocks import get_block
from learnerd.store.scrub import ScrubReport, scrub_store
from learnerd.store.suggestions import ServedAnswer, get_suggestion, record

KEY = "AKIAIOSFODNN7EXAMPLE"


def test_scrub_redacts_the_served_answers_and_their_blocks(tmp_path):
    conn = db.connect(tmp_path / "learnerd.db")
    answer = ServedAnswer(
        "doc", "v0001", f"s-{KEY}", (("user", "list buckets"),), f"AWS_ACCESS_KEY_ID={KEY} aws s3 ls", (), 1e9
    )
    with db.transaction(conn):
        block_id = record(conn, answer, now=1e9)  # unredacted, as if stored before the pattern existed
    report = ScrubReport()
    scrub_store(conn, Redactor(), report)
    assert report.tables["suggestions"] == 1 and report.tables["blocks"] == 1
    suggestion = get_suggestion(conn, block_id)
    assert KEY not in f"{suggestion.answer} {suggestion.command} {suggestion.session}"
    assert suggestion.command == "AWS_ACCESS_KEY_ID=<AWS_ACCESS_KEY_ID> aws s3 ls"
    assert KEY not in get_block(conn, block_id).generated.text
