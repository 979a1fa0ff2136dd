"""The file watch on .dlm documents (real files, real watchfiles): changes, new and removed documents,
directories created later, individually named documents elsewhere; a burst of saves through the
debouncer is one key on the queue."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from learnerd.runtime.debounce import Debouncer
from learnerd.sources.filewatch import DocumentWatcher, scan_documents

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.changed: list[Path] = []
        self.removed: list[Path] = []

    async def wait(self, what: list[Path], path: Path, timeout: float = 10.0) -> None:
        with anyio.fail_after(timeout):
            while path not in what:
                await anyio.sleep(0.02)


async def until_watching(watcher: DocumentWatcher, seen: Seen, directory: Path) -> None:
    """Touch a probe document until the watcher reports it (watchfiles arms in a thread shortly after start)."""
    probe = directory / "probe.dlm"
    with anyio.fail_after(10):
        for i in range(1000):
            probe.write_text(f"probe {i}\n")
            try:
                await seen.wait(seen.changed, probe, timeout=0.2)
                break
            except TimeoutError:
                continue
    probe.unlink()
    await seen.wait(seen.removed, probe)
    seen.changed.clear()
    seen.removed.clear()


def test_scan_finds_documents_recursively_and_skips_hidden_and_other_files(tmp_path: Path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    for name in ("a.dlm", "sub/b.dlm", ".a.dlm.x1.tmp", ".hidden.dlm", "notes.md", "a.dlm~"):
        (tmp_path / "docs" / name).write_text("x")
    outside = tmp_path / "elsewhere" / "named.dlm"
    outside.parent.mkdir()
    outside.write_text("x")
    found = scan_documents([tmp_path / "docs", tmp_path / "missing"], [outside, tmp_path / "absent.dlm"])
    assert sorted(found) == sorted([tmp_path / "docs" / "a.dlm", tmp_path / "docs" / "sub" / "b.dlm", outside])


@pytest.mark.parametrize("force_polling", [False, True], ids=["watchfiles", "polling only"])
async def test_changes_new_and_removed_documents_are_reported(tmp_path: Path, force_polling: bool):
    docs, later, elsewhere = tmp_path / "docs", tmp_path / "later", tmp_path / "elsewhere"
    docs.mkdir()
    elsewhere.mkdir()
    existing = docs / "existing.dlm"
    existing.write_text("v1\n")
    named = elsewhere / "learned.dlm"
    seen = Seen()
    watcher = DocumentWatcher(
        [docs, later], [named], seen.changed.append, seen.removed.append,
        rescan_interval_s=0.2 if force_polling else 0.5, force_polling=force_polling,
    )  # fmt: skip
    assert watcher.scan_now() == [existing]
    async with anyio.create_task_group() as tg:
        await tg.start(watcher.run)
        assert seen.changed == []  # what the first look found is not a change
        if not force_polling:
            await until_watching(watcher, seen, docs)

        existing.write_text("v2, longer\n")
        await seen.wait(seen.changed, existing)

        new = docs / "deep" / "new.dlm"
        new.parent.mkdir()
        new.write_text("new\n")
        await seen.wait(seen.changed, new)

        named.write_text("learned\n")  # an individually named document outside the docs directories
        await seen.wait(seen.changed, named)
        rollover = elsewhere / "learned-2.dlm"  # its rollover (learnerd.store.routing): watched with it
        rollover.write_text("rolled over\n")
        await seen.wait(seen.changed, rollover)
        (elsewhere / "unrelated.dlm").write_text("not watched\n")
        (elsewhere / "learned-x.dlm").write_text("not a rollover\n")

        later.mkdir()  # a docs directory that did not exist at start
        (later / "late.dlm").write_text("late\n")
        await seen.wait(seen.changed, later / "late.dlm")

        existing.unlink()
        await seen.wait(seen.removed, existing)
        await anyio.sleep(0.6)  # a full rescan, to catch duplicates or stray reports
        tg.cancel_scope.cancel()
    assert elsewhere / "unrelated.dlm" not in seen.changed and elsewhere / "learned-x.dlm" not in seen.changed
    assert seen.removed == [existing]
    assert watcher.documents() == sorted([new, named, rollover, later / "late.dlm"])


async def test_a_burst_of_saves_is_one_key_on_the_queue(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "a.dlm"
    doc.write_text("v0\n")
    queued: list[str] = []
    debouncer: Debouncer[str] = Debouncer(queued.append, quiet_s=0.5, max_wait_s=30.0)
    seen = Seen()

    def on_change(path: Path) -> None:
        seen.changed.append(path)
        debouncer.touch(str(path))

    watcher = DocumentWatcher([docs], [], on_change, seen.removed.append, rescan_interval_s=5.0)
    watcher.scan_now()
    async with anyio.create_task_group() as tg:
        tg.start_soon(debouncer.run)
        await tg.start(watcher.run)
        await until_watching(watcher, seen, docs)
        for i in range(8):  # eight saves, 0.1 s apart: never 0.5 s of quiet
            doc.write_text(f"v{i + 1}\n" * (i + 1))
            await anyio.sleep(0.1)
        await seen.wait(seen.changed, doc)
        assert str(doc) not in queued
        with anyio.fail_after(5):
            while str(doc) not in queued:
                await anyio.sleep(0.05)
        await anyio.sleep(1.0)
        tg.cancel_scope.cancel()
    assert len(seen.changed) > 1 and queued.count(str(doc)) == 1
