"""A person's edits of a document learnerd writes (issue 14, case 10): text appended at the end of
``learned.dlm`` falls, by dlm's grammar, inside its last section; it must survive every rewrite."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.reconcilers.probes import probes_reconciler
from learnerd.store.db import connect, transaction
from learnerd.store.dlm import QAPair, probe_section, read_document, update_document
from learnerd.store.examples import Example, delete_example, put_example

EXAMPLES = [
    Example("blk-1", "List the files here, with sizes.", "ls -la", "bash", 1.0),
    Example("blk-2", "How big is this directory?", "du -sh .\nfree -h", "bash", 2.0),
]
END_GUARD = "::prose::\n"
PARAGRAPHS = "".join(f"\n## Note {i}\n\nRemember to run `df -h` before step {i}.\n" for i in range(60))


def _cfg(tmp_path: Path):
    return config_from_dict({"state_dir": "state", "docs_dirs": ["docs"]}, base=tmp_path)


def setup(tmp_path: Path):
    cfg = _cfg(tmp_path)
    conn = connect(cfg.layout.db_path)
    with transaction(conn):
        for e in EXAMPLES:
            put_example(conn, e)
    rec = probes_reconciler(cfg)
    doc = tmp_path / "docs" / "learned.dlm"
    rec.reconcile_sync(str(doc))
    return rec, conn, doc


def probes(doc: Path) -> dict[str, list[QAPair]]:
    return {s.harvest_source: s.qa_pairs() for s in read_document(doc).auto_sections("learnerd/")}


def persons_prose(doc: Path) -> str:
    return "\n".join(s.content for s in read_document(doc).sections if s.type == "prose")


def test_learnerd_never_leaves_its_section_last_and_text_appended_after_it_is_prose(tmp_path: Path) -> None:
    rec, conn, doc = setup(tmp_path)
    assert doc.read_text().endswith("\n" + END_GUARD)
    sections = read_document(doc).sections
    assert [s.type for s in sections] == ["prose", "instruction", "instruction"]  # the guard is no section
    with doc.open("a") as f:
        f.write(PARAGRAPHS)
    assert probes(doc)["learnerd/blk-2"] == [QAPair(EXAMPLES[1].query, EXAMPLES[1].answer, probe=True)]

    with transaction(conn):  # a new example, the last one changed, one deleted: three rewrites
        put_example(conn, Example("blk-3", "Show the last commit", "git log -1", "bash", 3.0))
    rec.reconcile_sync(str(doc))
    with transaction(conn):
        put_example(conn, Example("blk-2", "How big is this directory?", "du -sh . | sort -h", "bash", 4.0))
    rec.reconcile_sync(str(doc))
    with transaction(conn):
        delete_example(conn, "blk-3")
    rec.reconcile_sync(str(doc))

    assert PARAGRAPHS.strip() in persons_prose(doc)
    assert persons_prose(doc).count("Remember to run") == 60
    assert probes(doc) == {
        "learnerd/blk-1": [QAPair(EXAMPLES[0].query, EXAMPLES[0].answer, probe=True)],
        "learnerd/blk-2": [QAPair("How big is this directory?", "du -sh . | sort -h", probe=True)],
    }
    again = rec.reconcile_sync(str(doc))
    assert not again.written  # converged


def test_text_appended_inside_learnerds_last_section_of_an_older_document_is_kept(tmp_path: Path) -> None:
    rec, _, doc = setup(tmp_path)
    older = doc.read_text().removesuffix(END_GUARD)  # as learnerd wrote documents before the end guard
    doc.write_text(older + PARAGRAPHS)
    absorbed = probes(doc)["learnerd/blk-2"][0].answer  # dlm's grammar reads the notes as part of the answer
    assert absorbed.startswith("du -sh .\nfree -h") and "Note 59" in absorbed

    outcome = probes_reconciler(_cfg(tmp_path)).reconcile_sync(str(doc))  # a restarted daemon: nothing cached
    assert outcome.written
    assert probes(doc)["learnerd/blk-2"] == [QAPair(EXAMPLES[1].query, EXAMPLES[1].answer, probe=True)]
    assert persons_prose(doc).count("Remember to run") == 60 and PARAGRAPHS.strip() in persons_prose(doc)
    text = doc.read_text()
    assert text.startswith(older) and text.endswith(PARAGRAPHS)  # learnerd's bytes and the person's, unchanged
    assert not rec.reconcile_sync(str(doc)).written


@pytest.mark.parametrize("how", ["upsert_auto_section", "append_section"])
def test_harvests_and_journaled_probes_keep_text_written_after_the_last_section(tmp_path: Path, how: str) -> None:
    _, _, doc = setup(tmp_path)
    with doc.open("a") as f:
        f.write("\nMy own closing words.\n")

    def harvest(d):
        return getattr(d, how)(probe_section("What prints the date?", "date", source="auto-harvest/x"))

    update_document(doc, harvest)
    document = read_document(doc)
    assert "My own closing words." in persons_prose(doc)
    assert [s.harvest_source for s in document.auto_sections()][-1] == "auto-harvest/x"
    assert doc.read_text().endswith("\n" + END_GUARD)
