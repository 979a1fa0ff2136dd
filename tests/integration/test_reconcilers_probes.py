"""The probes reconciler over a real SQLite database and real files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import anyio
import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.reconcilers.probes import ProbesReconciler, probes_reconciler
from learnerd.runtime.reconcile import Result
from learnerd.store.db import connect, transaction
from learnerd.store.dlm import DocumentTooLarge, QAPair, new_document, probe_section, read_document, update_document
from learnerd.store.dlm.document import MAX_DOCUMENT_BYTES
from learnerd.store.examples import Example, delete_example, put_example

HAND_WRITTEN = "\n::instruction::\n### Q\nWhat does `du -sh` print?\n\n### A\nThe total size, human-readable.\n"
OTHER_TOOL = (
    '\n::instruction::\n<!-- dlm-auto-harvest: source="auto-harvest/kl" -->\n### Q !probe\nSway?\n\n### A\nYes.\n'
)


def make(tmp_path: Path, **probes: object) -> tuple[ProbesReconciler, sqlite3.Connection, Path]:
    cfg = config_from_dict(
        {"state_dir": "state", "docs_dirs": ["docs"], **({"probes": probes} if probes else {})}, base=tmp_path
    )
    conn = connect(cfg.layout.db_path)
    return probes_reconciler(cfg), conn, tmp_path / "docs" / "learned.dlm"


def put(conn: sqlite3.Connection, *examples: Example) -> None:
    with transaction(conn):
        for e in examples:
            put_example(conn, e)


EXAMPLES = [
    Example("blk-1", "List the files here, with sizes.", "ls -la", "bash", 1.0),
    Example("blk-2", "# Disk usage\nHow big is this directory?", "du -sh .\n", "bash", 2.0),
    Example("blk-3", "Count lines in every Python file", "```sh\nfind . -name '*.py' | xargs wc -l\n```", "sh", 3.0),
    Example("blk-4", "Show the last commit", "git log -1 --stat", "bash", 4.0),
]


def probe_pairs(path: Path) -> dict[str, list[QAPair]]:
    return {s.harvest_source: s.qa_pairs() for s in read_document(path).auto_sections("learnerd/")}


def test_examples_become_one_probe_section_each_and_reconcile_converges(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path)
    put(conn, *EXAMPLES)
    key = str(rec.route(EXAMPLES[0]))
    assert key == str(doc) and rec.resync_keys() == [key]

    first = rec.reconcile_sync(key)
    assert (first.added, first.written) == (4, True)
    document = read_document(doc)
    assert document.frontmatter.base_model == "learnerd/tiny-llama" and len(document.frontmatter.dlm_id) == 26
    assert probe_pairs(doc) == {
        f"learnerd/{e.id}": [QAPair(e.query.strip(), e.answer.strip(), probe=True)] for e in EXAMPLES
    }
    assert [s.harvest_source for s in document.auto_sections()] == [f"learnerd/blk-{i}" for i in range(1, 5)]
    assert doc.stat().st_mode & 0o777 == 0o600, "a document learnerd creates is its owner's only"

    before, stat = doc.read_bytes(), doc.stat()
    again = rec.reconcile_sync(key)
    assert (again.written, again.unchanged, again.added) == (False, 4, 0)
    assert (
        doc.read_bytes() == before and doc.stat().st_mtime_ns == stat.st_mtime_ns and doc.stat().st_ino == stat.st_ino
    )


def test_change_replaces_one_section_delete_removes_it_and_others_stay(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path)
    put(conn, *EXAMPLES)
    rec.reconcile_sync(str(doc))
    with doc.open("a") as f:  # a person adds sections of their own, and sway's harvest added one
        f.write(HAND_WRITTEN + OTHER_TOOL)

    def not_ours(path: Path) -> list[tuple[str | None, str, tuple[str, ...]]]:
        return [
            (s.harvest_source, s.section_id, s.body)
            for s in read_document(path).sections
            if s.harvest_source is None or not s.harvest_source.startswith("learnerd/")
        ]

    hand = not_ours(doc)
    assert len(hand) == 3

    put(conn, Example("blk-2", "How big is this directory?", "du -sh . | sort -h", "bash", 9.0))
    changed = rec.reconcile_sync(str(doc))
    assert (changed.replaced, changed.unchanged, changed.added, changed.removed) == (1, 3, 0, 0)
    old = [(s.harvest_source, s.section_id) for s in read_document(doc).sections]
    sections = read_document(doc).sections
    assert [s.harvest_source for s in sections][1:5] == [f"learnerd/blk-{i}" for i in range(1, 5)]  # in place
    assert sections[2].qa_pairs() == [QAPair("How big is this directory?", "du -sh . | sort -h", probe=True)]
    assert not_ours(doc) == hand

    with transaction(conn):
        delete_example(conn, "blk-3")
    removed = rec.reconcile_sync(str(doc))
    assert (removed.removed, removed.written) == (1, True)
    now = [(s.harvest_source, s.section_id) for s in read_document(doc).sections]
    assert now == [x for x in old if x[0] != "learnerd/blk-3"]  # exactly one section gone, nothing else moved


def test_sections_that_the_grammar_cannot_carry_are_refused_and_counted(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path)
    put(
        conn,
        Example("ok", "Say hi", "echo '### A is fine inline'", "bash", 1.0),
        Example("hdr", "Tricky", "echo start\n### A\necho end", "bash", 2.0),
        Example("fence", "Trickier", "cat <<EOF\n::instruction::\nEOF", "bash", 3.0),
        Example("code", "Open", "```python\nprint(1)", "python", 4.0),
        Example("blank", "   ", "ls", "bash", 5.0),
    )
    outcome = rec.reconcile_sync(str(doc))
    assert sorted(dict(outcome.refused)) == ["blank", "code", "fence", "hdr"] and sorted(rec.refused) == sorted(
        dict(outcome.refused)
    )
    assert list(probe_pairs(doc)) == ["learnerd/ok"]
    with transaction(conn):
        delete_example(conn, "hdr")
    rec.reconcile_sync(str(doc))
    assert "hdr" not in rec.refused


def test_a_document_nobody_routes_to_is_not_created_and_routing_is_configurable(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path, by_language={"python": "py/python.dlm"}, base_model="hf:org/tiny")
    assert rec.reconcile_sync(str(doc)).written is False and not doc.exists()
    put(conn, Example("p1", "Print one", "print(1)", "python", 1.0), Example("b1", "List", "ls", "bash", 1.0))
    py = rec.route(Example("x", "", "", "python"))
    assert py == tmp_path / "docs" / "py" / "python.dlm" and set(rec.resync_keys()) == {str(doc), str(py)}
    rec.reconcile_sync(str(py))
    assert list(probe_pairs(py)) == ["learnerd/p1"] and not doc.exists()
    assert read_document(py).frontmatter.base_model == "hf:org/tiny"


def test_async_reconcile_and_a_broken_document_is_retried_later(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path, broken_document_retry_s=7.0, rewrite_interval_s=0.0)
    put(conn, EXAMPLES[0])
    assert anyio.run(rec.reconcile, str(doc)) == Result()
    doc.write_text(doc.read_text().replace("dlm_id:", "dlm_id: [", 1))
    broken = doc.read_bytes()
    assert anyio.run(rec.reconcile, str(doc)) == Result(requeue_after=7.0)
    assert doc.read_bytes() == broken


def test_a_save_by_a_persons_editor_during_the_write_loses_neither_change(tmp_path: Path) -> None:
    cfg = config_from_dict({"state_dir": "state", "docs_dirs": ["docs"]}, base=tmp_path)
    conn = connect(cfg.layout.db_path)
    doc = tmp_path / "docs" / "learned.dlm"
    put(conn, *EXAMPLES[:2])
    probes_reconciler(cfg).reconcile_sync(str(doc))
    put(conn, Example("blk-2", "How big is it?", "du -sh", "bash", 5.0), EXAMPLES[2])

    calls = []

    def editor_saves() -> None:
        """Between the reconciler's read and its replace, the person's editor writes the file (a new
        temp file renamed over it, as editors do)."""
        calls.append(1)
        if len(calls) == 1:
            text = doc.read_text().replace("# Learned by learnerd", "# My runbook, edited by hand")
            tmp = doc.with_suffix(".swp")
            tmp.write_text(text + HAND_WRITTEN)
            os.replace(tmp, doc)

    outcome = probes_reconciler(cfg, before_replace=editor_saves).reconcile_sync(str(doc))
    assert outcome.written and len(calls) == 2  # the compare-and-swap saw the save and did the edit again
    text = doc.read_text()
    assert "# My runbook, edited by hand" in text and "What does `du -sh` print?" in text  # the person's change
    assert probe_pairs(doc) == {  # ...and the reconciler's
        "learnerd/blk-1": [QAPair(EXAMPLES[0].query, EXAMPLES[0].answer, probe=True)],
        "learnerd/blk-2": [QAPair("How big is it?", "du -sh", probe=True)],
        "learnerd/blk-3": [QAPair(EXAMPLES[2].query, EXAMPLES[2].answer, probe=True)],
    }


@pytest.mark.parametrize("bad", [{"by_language": {"python": 3}}, {"document": ""}, {"broken_document_retry_s": 0}])
def test_probes_config_is_validated(tmp_path: Path, bad: dict) -> None:
    from learnerd.sections import ConfigError

    with pytest.raises(ConfigError, match="probes"):
        config_from_dict({"probes": bad}, base=tmp_path)


@pytest.mark.anyio
async def test_a_burst_of_examples_is_one_rewrite_per_interval(tmp_path: Path) -> None:
    cfg = config_from_dict(
        {"state_dir": "state", "docs_dirs": ["docs"], "probes": {"rewrite_interval_s": 5.0}}, base=tmp_path
    )
    conn = connect(cfg.layout.db_path)
    now = [100.0]
    rec = probes_reconciler(cfg, monotonic=lambda: now[0])
    key = str(rec.route(EXAMPLES[0]))
    put(conn, EXAMPLES[0])
    assert await rec.reconcile(key) == Result()
    put(conn, *EXAMPLES[1:])
    now[0] = 102.0
    assert await rec.reconcile(key) == Result(requeue_after=3.0), "written 2 s ago: wait out the interval"
    assert len(probe_pairs(tmp_path / "docs" / "learned.dlm")) == 1
    now[0] = 105.0
    assert await rec.reconcile(key) == Result()
    assert len(probe_pairs(tmp_path / "docs" / "learned.dlm")) == 4
    now[0] = 105.5
    assert await rec.reconcile(key) == Result(requeue_after=4.5)
    assert rec.changes["documents_written"] == 2


def _filler(n: int, size: int) -> Example:
    return Example(f"big-{n:02d}", f"Print filler number {n}", f"echo {n} " + "x" * size, "bash", float(10 + n))


def test_a_full_document_rolls_over_to_a_new_one_and_sections_stay_where_they_are(tmp_path: Path) -> None:
    """Past ``rollover_bytes`` new sections go to ``learned-2.dlm``, ``-3`` (new documents: their own ULID, as
    the first); each document stays within the bound; a section never moves; a deleted example's section goes
    from whichever document holds it; the whole chain converges."""
    rec, conn, doc = make(tmp_path, rollover_bytes=16 * 1024)
    put(conn, *(_filler(n, 3000) for n in range(12)))
    first = rec.reconcile_sync(str(doc))
    chain = sorted((tmp_path / "docs").glob("learned*.dlm"))
    assert [p.name for p in chain] == ["learned-2.dlm", "learned-3.dlm", "learned.dlm"]
    assert first.added == 12 and all(p.stat().st_size <= 16 * 1024 for p in chain)
    held = {p.name: sorted(probe_pairs(p)) for p in chain}
    assert sorted(s for sources in held.values() for s in sources) == [f"learnerd/big-{n:02d}" for n in range(12)]
    assert held["learned.dlm"][0] == "learnerd/big-00" and held["learned-3.dlm"][-1] == "learnerd/big-11"
    ids = {read_document(p).frontmatter.dlm_id for p in chain}
    assert len(ids) == 3, "each rollover is a document of its own"

    again = rec.reconcile_sync(str(doc))
    assert (again.written, again.added, again.unchanged) == (False, 0, 12)

    with transaction(conn):
        delete_example(conn, "big-00")
    put(conn, _filler(12, 3000))
    third = rec.reconcile_sync(str(doc))
    assert (third.removed, third.added) == (1, 1)
    assert "learnerd/big-00" not in probe_pairs(doc)
    assert "learnerd/big-12" in probe_pairs(tmp_path / "docs" / "learned-3.dlm"), "new ones go to the last"
    assert {p.name: sorted(probe_pairs(p)) for p in chain if p != doc} == {
        "learned-2.dlm": held["learned-2.dlm"],
        "learned-3.dlm": sorted([*held["learned-3.dlm"], "learnerd/big-12"]),
    }


def test_a_section_larger_than_an_empty_document_may_hold_is_refused(tmp_path: Path) -> None:
    rec, conn, doc = make(tmp_path, rollover_bytes=16 * 1024)
    put(conn, EXAMPLES[0], _filler(1, 20_000))
    outcome = rec.reconcile_sync(str(doc))
    assert outcome.added == 1 and list(probe_pairs(doc)) == ["learnerd/blk-1"]
    assert "rollover_bytes" in dict(outcome.refused)["big-01"] and "big-01" in rec.refused
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["learned.dlm"]


def test_learnerd_never_writes_a_document_it_could_not_read_back(tmp_path: Path) -> None:
    """A document a person filled to the parse cap takes no more: the write is refused (DocumentTooLarge, a
    DocumentError: retried later) and the file is left as it was."""
    path = tmp_path / "full.dlm"
    path.write_bytes(new_document("learnerd/tiny-llama", prose="# " + "x" * (MAX_DOCUMENT_BYTES - 200)).to_bytes())
    before = path.read_bytes()
    section = probe_section("one more?", "echo " + "y" * 500, source="learnerd/one")
    with pytest.raises(DocumentTooLarge, match="over the"):
        update_document(path, lambda d: d.append_section(section))
    assert path.read_bytes() == before


def test_a_rollover_document_is_served_as_any_other(tmp_path: Path) -> None:
    from learnerd.ml.serving import ModelCatalog

    rec, conn, doc = make(tmp_path, rollover_bytes=16 * 1024)
    put(conn, *(_filler(n, 3000) for n in range(6)))
    rec.reconcile_sync(str(doc))
    rollover = tmp_path / "docs" / "learned-2.dlm"
    served = ModelCatalog([tmp_path / "docs"], ["learnerd/tiny-llama"]).find("learned-2")
    assert served is not None and served.doc_key == read_document(rollover).frontmatter.dlm_id
