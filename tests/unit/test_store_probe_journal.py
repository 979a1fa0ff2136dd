"""The probe journal: accepted probes survive a reopen until consumed; a torn last line (an append that
never returned) is dropped; the file is compacted; a damaged line is refused with its line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.store import probe_journal
from learnerd.store.probe_journal import InjectedProbe, JournalError, ProbeJournal


def probe(i: int, document: str = "/docs/learned.dlm", tags: tuple[str, ...] = ()) -> InjectedProbe:
    return InjectedProbe(
        id=f"{i:032x}", document=document, prompt=f"question {i}?", reference=f"answer {i}", tags=tags,
        source_addr="127.0.0.1", accepted_at=1_767_225_600.0 + i,
    )  # fmt: skip


def test_pending_probes_survive_reopen_until_consumed(tmp_path: Path):
    path = tmp_path / "journals" / "p.jsonl"
    journal = ProbeJournal(path)
    journal.append([probe(1), probe(2, "/docs/other.dlm")])
    journal.append([probe(3)])
    assert [p.id for p in journal.pending()] == [probe(1).id, probe(2).id, probe(3).id]
    assert journal.documents() == ["/docs/learned.dlm", "/docs/other.dlm"]
    journal.close()

    again = ProbeJournal(path)  # a restart (or a crash: every append was fsynced before it returned)
    assert again.pending() == [probe(1), probe(2, "/docs/other.dlm"), probe(3)]
    assert again.consume([probe(1).id, probe(3).id, "unknown"]) == 2
    assert again.consume([probe(1).id]) == 0
    again.close()
    third = ProbeJournal(path)
    assert third.pending() == [probe(2, "/docs/other.dlm")] and len(third) == 1
    assert third.pending("/docs/learned.dlm") == []
    # opening compacted the file: only the pending probe's accept line is left
    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["probe"]["id"] == probe(2).id
    assert (path.stat().st_mode & 0o777) == 0o600


def test_torn_last_line_is_dropped(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    journal = ProbeJournal(path)
    journal.append([probe(1)])
    journal.close()
    with path.open("ab") as f:  # a crash in the middle of an append: no newline, never acknowledged
        f.write(b'{"op":"accept","probe":{"id":"')
    reopened = ProbeJournal(path)
    assert reopened.pending() == [probe(1)]
    reopened.append([probe(2)])  # later appends are not glued to the torn bytes
    reopened.close()
    assert [p.id for p in ProbeJournal(path).pending()] == [probe(1).id, probe(2).id]


def test_damaged_middle_line_is_refused_with_its_line(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    journal = ProbeJournal(path)
    journal.append([probe(1), probe(2)])
    journal.close()
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(lines[0] + b"\n" + b"not json\n" + lines[1] + b"\n")
    with pytest.raises(JournalError, match=r"p\.jsonl:2: not a probe journal record"):
        ProbeJournal(path)


def test_consuming_everything_compacts_a_large_file(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(probe_journal, "COMPACT_BYTES", 500)
    path = tmp_path / "p.jsonl"
    journal = ProbeJournal(path)
    journal.append([probe(i) for i in range(10)])
    journal.consume([probe(i).id for i in range(5)])
    assert path.stat().st_size > 500  # something is still pending: no compaction
    journal.consume([probe(i).id for i in range(5, 10)])
    assert path.stat().st_size == 0 and len(journal) == 0
    journal.append([probe(11)])
    journal.close()
    assert ProbeJournal(path).pending() == [probe(11)]


def test_a_duplicate_id_is_refused(tmp_path: Path):
    journal = ProbeJournal(tmp_path / "p.jsonl")
    journal.append([probe(1)])
    with pytest.raises(ValueError):
        journal.append([probe(1)])
    assert len(journal) == 1


@pytest.mark.parametrize(
    ("tags", "prompt", "source"),
    [
        (("regression",), "q", "rpc-inject/regression"),
        (("Needs Review", "x"), "q", "rpc-inject/needs-review"),
        ((), "How do I list pods?", "rpc-inject/how-do-i-list-pods"),
        (('say "hi"',), "q", "rpc-inject/say-hi"),
        (("!!!",), "q", "rpc-inject/probe"),
        ((), "x" * 100, "rpc-inject/" + "x" * 48),
    ],
)
def test_harvest_source_is_the_first_tag_or_the_prompt_as_a_slug(tags, prompt, source):
    p = InjectedProbe(id="0", document="/d.dlm", prompt=prompt, reference="a", tags=tags)
    assert p.harvest_source == source
