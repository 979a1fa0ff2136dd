"""``learnerd forget`` through a running daemon: the CLI in a subprocess, the daemon in the test on its real
admin socket (shared MiniLM). The offline path and the retrain are in tests/e2e/test_forget.py."""

from __future__ import annotations

import json
from pathlib import Path

import anyio.to_thread
import pytest

from learnerd.store import foyle_examples
from learnerd.store.dlm import read_document
from learnerd.store.examples import get_example
from tests.support.daemon import SAMPLE_BLOCKS, append_blocks, daemon_config, eventually, post_json, running_service
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

        report = await forget(cfg.state_dir, "--match", "du -sh")
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
    unknown = run_cli("forget", "--example", "nope", "--state-dir", str(state), check=False)
    assert unknown.returncode == 1 and "no example or block has the id 'nope'" in unknown.stderr
    missing = run_cli("forget", "--source", str(tmp_path / "gone.jsonl"), "--state-dir", str(state), check=False)
    assert missing.returncode == 1 and "gone.jsonl: no such file" in missing.stderr
    removed = run_cli("forget", "--remove", "0123456789abcdef", "--state-dir", str(state), check=False)
    assert removed.returncode == 1 and "no tombstone has the id" in removed.stderr
    assert run_cli("forget", "--list", "--state-dir", str(state)).stdout.strip() == "no tombstones"
