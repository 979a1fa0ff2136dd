"""The analyzer over foyle's real logs (a copy of ../shared/peer-data/foyle): every trace ingested."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from learnerd.store.blocks import Cell, get_block, list_block_ids
from learnerd.store.foyle_traces import count_partial_traces
from tests.support.analyzer import Harness, append, captured_logs

# What the fixtures contain, read from them by hand.
GCLOUD_DOC = "Use gcloud to read the logs for the cluster dev in project foyle-dev; assume you aready logged in"
GIT_DOC = "Use git to find the merge point with origin/main"
# generate_trace_lines.jsonl, trace 2c4efb93…: 7 generated blocks (the response is the file's last
# line, written without a final LF).
GCLOUD_BLOCKS = {
    "10b11f2d-7c8d-4d58-bedc-7e2dd51a85dc": (
        "markup",
        "To read the logs for the cluster `dev` in project `foyle-dev` using `gcloud`, "
        "you can use the following command:",
    ),
    "8594d742-39d7-473b-b4ad-901ff362fdb3": (
        "code",
        "gcloud container clusters get-credentials dev --project=foyle-dev\n",
    ),
    "f1662328-e884-418c-a084-95dfb1a3f7fc": (
        "markup",
        "\n\nThis command will authenticate `kubectl` to the cluster `dev` in the `foyle-dev` project.\n\n"
        "After this, you can use `kubectl` to read the logs for the cluster. "
        "Here's the command to read the logs for a specific pod:",
    ),
    "4feb6219-d050-4630-8ceb-d08ec149b60d": ("code", "kubectl logs <pod_name>\n"),
    "3893a0b6-8c84-49ca-a38c-fbf6d7adfcde": (
        "markup",
        "\n\nReplace `<pod_name>` with the name of the pod for which you want to read the logs. "
        "If you are not sure about the pod name, you can list all pods in the cluster using the following command:",
    ),
    "fd276a6f-f379-4f9c-9779-0ed07819d0f5": ("code", "kubectl get pods\n"),
    "d507ce35-af59-4f92-8dec-6c37d7b26647": (
        "markup",
        "\n\nPlease execute the commands above and provide the output if you need further assistance.",
    ),
}
# foyle.logs.2024-04-16T19:06:47.json, trace 80383398…: 3 generated blocks.
GIT_BLOCKS = {
    "9557680b-e08c-4d1d-b098-6dcd03e0e108": (
        "markup",
        "To find the merge point with `origin/main` in your Git repository, you can use the following command:",
    ),
    "23706965-8e3b-440d-ba1a-1e1cc035fbd4": ("code", "git merge-base HEAD origin/main\n"),
    "48d530be-254a-493f-8cf4-20627078f830": (
        "markup",
        "\n\nThis command will output the commit hash of the common ancestor between your current branch (`HEAD`) "
        "and `origin/main`, which represents the merge point.\n\nAfter running this command, you can see the commit "
        "hash that represents the merge point between your current branch and `origin/main`. "
        "Let's execute the command to get the specific commit hash.",
    ),
}
EXECUTED_BLOCK = "23706965-8e3b-440d-ba1a-1e1cc035fbd4"  # the EXECUTE LogEvent ran "curl" in it; ACCEPTED before
LINES = 2 + 78 + 5  # execute_traces_lines.jsonl, foyle.logs.….json, generate_trace_lines.jsonl
RELEVANT = 2 + 2 + 2 + 2  # execute trace halves, generate trace halves (twice), two LogEvents


@pytest.fixture
def harness(peer_copy, tmp_path: Path) -> Harness:
    return Harness(tmp_path, [peer_copy("foyle")])


@pytest.mark.anyio
async def test_every_trace_is_ingested_with_its_document_and_generated_content(harness: Harness):
    with captured_logs() as logs:
        stats = await harness.analyzer().sync()
    expected = {**GCLOUD_BLOCKS, **GIT_BLOCKS}
    assert set(list_block_ids(harness.conn)) == set(expected)
    assert sorted(harness.take_notified()) == sorted(expected)  # each changed block notified once
    for block_id, (kind, text) in expected.items():
        block = get_block(harness.conn, block_id)
        assert block is not None and block.source == "foyle"
        doc = GCLOUD_DOC if block_id in GCLOUD_BLOCKS else GIT_DOC
        assert block.context == [Cell("markup", doc, "markdown")]
        assert block.generated is not None and block.generated.text == text and block.generated.kind == kind
        assert block.generated.language == ("bash" if kind == "code" else "")
        assert block.eval_mode is False
        if block_id != EXECUTED_BLOCK:
            assert block.executed is None and block.suggestion_status is None
    executed = get_block(harness.conn, EXECUTED_BLOCK)
    assert executed.executed == Cell("code", "curl", "") and executed.exit_code is None
    assert executed.suggestion_status == "accepted"

    assert stats.lines_read == LINES and stats.skipped_lines == LINES - RELEVANT
    assert stats.traces_joined == 2 and stats.pending_traces == 0 and count_partial_traces(harness.conn) == 0
    assert stats.unjoinable_traces == {"empty_block_id": 1}
    assert stats.malformed_lines == stats.unknown_events == stats.oversized_lines == 0
    assert stats.files_tracked == 3 and stats.blocks_changed == 10
    unjoinable = [e for e in logs if e["event"].startswith("foyle trace names no block")]
    assert len(unjoinable) == 1 and unjoinable[0]["log_level"] == "debug"
    assert unjoinable[0]["file"].endswith("execute_traces_lines.jsonl") and unjoinable[0]["line"] == 2
    assert unjoinable[0]["reason"] == "empty_block_id"
    assert unjoinable[0]["trace_id"] == "43281a4e73cd76570e9851589207a8bd"


@pytest.mark.anyio
async def test_a_second_sync_and_a_restart_change_nothing(harness: Harness):
    first = harness.analyzer()
    await first.sync()
    harness.take_notified()
    before = [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")]
    harness.clock.advance(60)
    stats = await first.sync()
    assert stats.lines_read == LINES and harness.take_notified() == []
    stats = await harness.analyzer().sync()  # a new process on the same database
    assert stats.lines_read == 0 and harness.take_notified() == []
    assert [tuple(r) for r in harness.conn.execute("SELECT * FROM blocks ORDER BY id")] == before


@pytest.mark.anyio
async def test_eval_mode_traces_mark_their_blocks(peer_data: Path, tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = (peer_data / "foyle" / "generate_trace_lines.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["evalMode"] = True  # what foyle's agent writes in eval mode (generate_trace_lines_eval_mode.jsonl)
    (logs / "eval.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    harness = Harness(tmp_path, [logs])
    await harness.analyzer().sync()
    assert set(list_block_ids(harness.conn)) == set(GCLOUD_BLOCKS)
    assert all(get_block(harness.conn, b).eval_mode for b in GCLOUD_BLOCKS)


@pytest.mark.anyio
async def test_a_trace_split_across_a_restart_is_joined(peer_data: Path, tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = (peer_data / "foyle" / "generate_trace_lines.jsonl").read_text().splitlines()
    log_file = logs / "foyle.logs.json"
    log_file.write_text("\n".join(lines[:2]) + "\n")  # the request half and an OpenAI line
    harness = Harness(tmp_path, [logs])
    stats = await harness.analyzer().sync()
    assert stats.pending_traces == 1 and list_block_ids(harness.conn) == [] and harness.take_notified() == []
    append(log_file, "\n".join(lines[2:]) + "\n")
    stats = await harness.analyzer().sync()  # a new process: the request half came from the database
    assert stats.traces_joined == 1 and stats.pending_traces == 0 and stats.lines_read == len(lines) - 2
    assert sorted(harness.take_notified()) == sorted(GCLOUD_BLOCKS)
    assert get_block(harness.conn, "fd276a6f-f379-4f9c-9779-0ed07819d0f5").context == [
        Cell("markup", GCLOUD_DOC, "markdown")
    ]


@pytest.mark.anyio
async def test_foyle_and_block_log_lines_may_share_a_file(peer_data: Path, tmp_path: Path):
    """Both formats are read from one file; a block-log line may not replace a cell of foyle's block (a block's
    parts are replaced only by the source that made it), and is counted as refused."""
    from learnerd.analyzer.blocklog import event_line

    logs = tmp_path / "logs"
    logs.mkdir()
    src = peer_data / "foyle" / "foyle.logs.2024-04-16T19:06:47.json"
    before = await foyle_block_alone(src, tmp_path / "alone")
    mixed = src.read_text()
    mixed += event_line("context", "own-1", 1724993750.0, cells=[Cell("markup", "Find the merge base", "markdown")])
    mixed += event_line(
        "executed", "own-1", 1724993760.0, cell=Cell("code", "git merge-base HEAD main", "bash"), exit_code=0
    )
    mixed += event_line(
        "executed", EXECUTED_BLOCK, 1724993760.0, cell=Cell("code", "git merge-base HEAD main", "bash"), exit_code=0
    )
    (logs / "copy.json").write_text(mixed)
    harness = Harness(tmp_path, [logs])
    stats = await harness.analyzer().sync()
    own = get_block(harness.conn, "own-1")
    assert own.source == "learnerd" and own.executed == Cell("code", "git merge-base HEAD main", "bash")
    block = get_block(harness.conn, EXECUTED_BLOCK)
    stamps = {"created_at": block.created_at, "updated_at": block.updated_at, "executed_origin": block.executed_origin}
    assert block == dataclasses.replace(before, **stamps), "foyle's block as foyle's log alone makes it"
    assert block.context == [Cell("markup", GIT_DOC, "markdown")] and stats.refused_events == 1


async def foyle_block_alone(log: Path, root: Path):
    """``EXECUTED_BLOCK`` as foyle's log ``log`` alone makes it."""
    (root / "logs").mkdir(parents=True)
    (root / "logs" / log.name).write_text(log.read_text())
    harness = Harness(root, [root / "logs"])
    await harness.analyzer().sync()
    return get_block(harness.conn, EXECUTED_BLOCK)
