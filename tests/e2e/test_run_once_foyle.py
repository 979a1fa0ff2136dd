"""``learnerd run --once`` over foyle's real logs: every trace ingested, the exact blocks recovered.
On SQLite: the PostgreSQL store of the same blocks, examples and foyle partial traces is pinned by
``tests/integration/test_store_backends.py`` (the same calls give the same rows on either backend)."""

from learnerd.store.blocks import Cell, get_block, list_block_ids
from learnerd.store.examples import list_examples
from tests.support.pipeline import open_store, run_once

GCLOUD_DOC = "Use gcloud to read the logs for the cluster dev in project foyle-dev; assume you aready logged in"
GIT_DOC = "Use git to find the merge point with origin/main"
GCLOUD_IDS = {
    "10b11f2d-7c8d-4d58-bedc-7e2dd51a85dc",
    "8594d742-39d7-473b-b4ad-901ff362fdb3",
    "f1662328-e884-418c-a084-95dfb1a3f7fc",
    "4feb6219-d050-4630-8ceb-d08ec149b60d",
    "3893a0b6-8c84-49ca-a38c-fbf6d7adfcde",
    "fd276a6f-f379-4f9c-9779-0ed07819d0f5",
    "d507ce35-af59-4f92-8dec-6c37d7b26647",
}
GIT_IDS = {
    "9557680b-e08c-4d1d-b098-6dcd03e0e108",
    "23706965-8e3b-440d-ba1a-1e1cc035fbd4",
    "48d530be-254a-493f-8cf4-20627078f830",
}
EXECUTED = "23706965-8e3b-440d-ba1a-1e1cc035fbd4"


def test_run_once_over_foyle_logs_recovers_every_block_and_its_document(peer_copy, tmp_path):
    logs = peer_copy("foyle")
    summary = run_once(tmp_path / "state", logs)

    conn = open_store(tmp_path / "state")
    assert set(list_block_ids(conn)) == GCLOUD_IDS | GIT_IDS
    for block_id in GCLOUD_IDS | GIT_IDS:
        doc = GCLOUD_DOC if block_id in GCLOUD_IDS else GIT_DOC
        assert get_block(conn, block_id).context == [Cell("markup", doc, "markdown")]
    assert get_block(conn, "8594d742-39d7-473b-b4ad-901ff362fdb3").generated == Cell(
        "code", "gcloud container clusters get-credentials dev --project=foyle-dev\n", "bash"
    )
    executed = get_block(conn, EXECUTED)
    assert executed.generated.text == "git merge-base HEAD origin/main\n"
    assert executed.executed.text == "curl"

    # The one executed block is the one example: its context, and what the person really ran.
    examples = list_examples(conn)
    assert [(e.id, e.query, e.answer) for e in examples] == [(EXECUTED, GIT_DOC, "curl")]
    assert summary["blocks"] == 10 and summary["examples"] == 1 and summary["vectors"] == 1
    # Every trace was ingested; the Executor trace (empty block id) is counted as unjoinable.
    assert summary["analyzer"]["unjoinable_traces"] == {"empty_block_id": 1}
    assert summary["analyzer"]["malformed_lines"] == 0
    assert summary["analyzer"]["lines_read"] == sum(
        len(p.read_text().splitlines()) for p in logs.iterdir() if p.is_file()
    )
