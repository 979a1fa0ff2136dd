"""``learnerd forget`` through a running daemon: the CLI in a subprocess, the daemon in the test on its real
admin socket (shared MiniLM); the offline refusals and the prompt run the CLI in this process
(:func:`tests.support.in_process.run_cli_here`).
The offline path and the retrain are in tests/e2e/test_forget.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio.to_thread
import pytest

from learnerd.store import foyle_examples
from learnerd.store.dlm import read_document
from learnerd.store.examples import get_example
from tests.support.daemon import SAMPLE_BLOCKS, append_blocks, daemon_config, eventually, post_json, running_service
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_cli

pytestmark = pytest.mark.anyio


def sources(path: Path) -> list[str | None]:
    return [s.harvest_source for s in read_document(path).sections if s.fenced]


async def forget(state: Path, *args: str) -> dict:
    proc = await anyio.to_thread.run_sync(lambda: run_cli("forget", "--json", "--state-dir", str(state), *args))
    return json.loads(proc.stdout)


async def test_forget_in_the_daemon_stops_retrieval_at_once_and_nothing_brings_it_back(short_root: Path, minilm):
    cfg = daemon_config(short_root)
    cfg.export.foyle.dir = str(short_root / "foyle")
    export, document, log_file = (
        short_root / "foyle",
        short_root / "docs" / "learned.dlm",
        short_root / "logs" / "a.jsonl",
    )
    append_blocks(log_file, SAMPLE_BLOCKS)
    async with running_service(cfg, minilm) as running, running.session() as s:
        daemon = running.daemon

        async def settled() -> bool:
            return len(foyle_examples.ids_on_disk(export)) == 3 and all(q.idle for q in daemon.queues.values())

        await eventually(settled, what="learned and exported")
        assert "learnerd/b-du" in sources(document)

        dry = await forget(cfg.state_dir, "--match", "du -sh", "--dry-run")
        assert (
            [e["id"] for e in dry["examples"]] == ["b-du"]
            and dry["dry_run"]
            and dry["tombstone"]["block_ids"] == ["b-du"]
        )
        assert "b-du" in daemon.index.ids() and get_example(daemon.conn, "b-du") is not None

        report = await forget(cfg.state_dir, "--match", "du -sh", "--yes")
        assert "b-du" not in daemon.index.ids(), "retrieval stops returning it before the command returns"
        code, hits = await post_json(s, "/search", {"text": "Show how much disk space a folder uses", "k": 3})
        assert code == 200 and "b-du" not in [h["id"] for h in hits]
        assert report["vectors"] == 1 and report["documents"] == {str(document): 1}
        assert report["export_files"] == [str(foyle_examples.example_path(export, "b-du"))]
        assert get_example(daemon.conn, "b-du") is None and "learnerd/b-du" not in sources(document)
        assert sorted(foyle_examples.ids_on_disk(export)) == ["b-ls", "b-pwd"]

        # the block logged again (re-executed later) and a backfill of everything: still forgotten
        append_blocks(log_file, {"b-du": SAMPLE_BLOCKS["b-du"]})
        await eventually(lambda: _lines_read(daemon, 8), what="the new lines read")
        code, _ = await post_json(s, "/backfill", {"since": 0})
        assert code == 202
        await eventually(settled_without(daemon, export, "b-du"), what="backfill done")
        assert get_example(daemon.conn, "b-du") is None and "learnerd/b-du" not in sources(document)

        stones = await forget(cfg.state_dir, "--list")
        assert [t["id"] for t in stones] == [report["tombstone"]["id"]]
        removed = await forget(cfg.state_dir, "--remove", report["tombstone"]["id"])
        assert removed["value"] == "du -sh"
        await eventually(lambda: _learned_again(daemon, export), what="learned again once the tombstone is gone")
        assert await forget(cfg.state_dir, "--list") == []


async def _lines_read(daemon, n: int) -> bool:
    return daemon.analyzer.stats.lines_read >= n


def settled_without(daemon, export: Path, example_id: str):
    async def check() -> bool:
        idle = all(q.idle for q in daemon.queues.values())
        return idle and example_id not in foyle_examples.ids_on_disk(export)

    return check


async def _learned_again(daemon, export: Path) -> bool:
    return get_example(daemon.conn, "b-du") is not None and "b-du" in foyle_examples.ids_on_disk(export)


def test_offline_forget_refuses_what_it_cannot_find_with_a_clear_message(tmp_path: Path):
    from learnerd.store import db

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db.connect(state / "learnerd.db").close()
    unknown = run_cli_here("forget", "--example", "nope", "--state-dir", str(state), check=False)
    assert unknown.returncode == 1 and "no example or block has the id 'nope'" in unknown.stderr
    missing = run_cli_here("forget", "--source", str(tmp_path / "gone.jsonl"), "--state-dir", str(state), check=False)
    assert missing.returncode == 1 and "gone.jsonl: no such file" in missing.stderr
    removed = run_cli_here("forget", "--remove", "0123456789abcdef", "--state-dir", str(state), check=False)
    assert removed.returncode == 1 and "no tombstone has the id" in removed.stderr
    assert run_cli_here("forget", "--list", "--state-dir", str(state)).stdout.strip() == "no tombstones"


@pytest.fixture
def learned_state(tmp_path: Path) -> Path:
    """A state directory with two examples and their probe sections, written as the reconcilers write them."""
    from learnerd.store import db
    from learnerd.store.dlm import new_document, probe_section
    from learnerd.store.examples import Example, put_example

    state = tmp_path / "state"
    (state / "docs").mkdir(parents=True)
    state.chmod(0o700)
    conn = db.connect(state / "learnerd.db")
    document = new_document("learnerd/tiny-llama", prose="# Learned")
    with db.transaction(conn):
        for example in (
            Example("b-pods", "List the pods in the dev namespace", "kubectl get pods -n dev", "bash", 1.0),
            Example("b-disk", "Show disk usage", "du -sh .", "bash", 2.0),
        ):
            put_example(conn, example)
            document = document.append_section(
                probe_section(example.query, example.answer, source=f"learnerd/{example.id}")
            )
    conn.close()
    (state / "docs" / "learned.dlm").write_bytes(document.to_bytes())
    return state


def _examples(state: Path) -> list[str]:
    from tests.support.pipeline import table_rows

    return [r[0] for r in table_rows(state, "SELECT id FROM examples ORDER BY id")]


@pytest.mark.parametrize("text", ["", " ", "ab c"])
def test_a_match_of_fewer_than_four_non_space_characters_is_a_one_line_error(learned_state: Path, text: str):
    proc = run_cli_here("forget", "--match", text, "--yes", "--state-dir", str(learned_state), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("learnerd forget: error: --match: ") and "at least 4 non-space characters" in line
    assert _examples(learned_state) == ["b-disk", "b-pods"]


def test_a_match_prints_what_it_will_forget_and_asks_first(learned_state: Path):
    def forget_answering(answer: str) -> subprocess.CompletedProcess[str]:
        args = ("forget", "--match", "get pods -n dev", "--state-dir", str(learned_state))
        return run_cli_here(*args, stdin=answer, check=False)

    declined = forget_answering("n\n")
    assert declined.returncode == 1 and "nothing was forgotten" in declined.stderr
    assert "would forget 1 example(s)" in declined.stderr and "b-pods: 'kubectl get pods -n dev'" in declined.stderr
    assert "[y/N]" in declined.stderr and _examples(learned_state) == ["b-disk", "b-pods"]
    assert "learnerd/b-pods" in sources(learned_state / "docs" / "learned.dlm")
    assert forget_answering("").returncode == 1, "no answer (stdin closed) is no"
    accepted = forget_answering("y\n")
    assert accepted.returncode == 0 and "forgot 1 example(s)" in accepted.stdout
    assert _examples(learned_state) == ["b-disk"]
    assert "learnerd/b-pods" not in sources(learned_state / "docs" / "learned.dlm")


def test_a_source_path_that_is_gone_forgets_the_blocks_read_from_it(learned_state: Path, tmp_path: Path):
    from learnerd.store import db
    from learnerd.store.blocks import BlockEvent, Cell, LineOrigin, apply_event

    log = tmp_path / "logs" / "rollout.jsonl"  # never created: rotated away since it was read
    conn = db.connect(learned_state / "learnerd.db")
    with db.transaction(conn):
        event = BlockEvent("b-disk", "codex", 1.0, executed=Cell("code", "du -sh ."))
        apply_event(conn, event, 2.0, LineOrigin(str(log), 7))
    conn.close()
    report = json.loads(
        run_cli_here("forget", "--source", str(log), "--json", "--state-dir", str(learned_state)).stdout
    )
    assert [e["id"] for e in report["examples"]] == ["b-disk"] and _examples(learned_state) == ["b-pods"]
