"""The compare-and-swap document write."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from learnerd.store.atomic import replace_if_unchanged
from learnerd.store.dlm import (
    ConflictError,
    DocumentError,
    UnrepresentableError,
    new_document,
    probe_section,
    read_document,
    update_document,
)

FM = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: smollm2-135m\n---\n\n# Notes\n"


def add_probe(name: str):
    return lambda d: d.upsert_auto_section(probe_section(f"{name}?", name, source=f"t/{name}"))


def test_replace_if_unchanged(tmp_path: Path) -> None:
    f = tmp_path / "f"
    assert replace_if_unchanged(f, b"one", None) and f.read_bytes() == b"one"
    assert not replace_if_unchanged(f, b"two", None) and f.read_bytes() == b"one"  # exists: no clobber
    assert not replace_if_unchanged(f, b"two", b"other") and f.read_bytes() == b"one"
    assert replace_if_unchanged(f, b"two", b"one") and f.read_bytes() == b"two"
    assert not replace_if_unchanged(tmp_path / "gone", b"x", b"y") and not (tmp_path / "gone").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temp file left behind


def test_unchanged_edit_writes_nothing(tmp_path: Path) -> None:
    doc = tmp_path / "d.dlm"
    doc.write_text(FM)
    stat = doc.stat()
    outcome = update_document(doc, lambda d: d)
    assert (outcome.written, outcome.attempts) == (False, 1) and doc.stat().st_mtime_ns == stat.st_mtime_ns
    with pytest.raises(FileNotFoundError):
        update_document(tmp_path / "missing.dlm", lambda d: d)


def test_concurrent_save_is_merged_not_clobbered(tmp_path: Path) -> None:
    doc = tmp_path / "d.dlm"
    doc.write_text(FM)
    saves = iter([FM + "\nmy own line\n"])

    def person_saves() -> None:
        text = next(saves, None)
        if text is not None:
            doc.write_text(text)  # an editor writing in place

    outcome = update_document(doc, add_probe("a"), before_replace=person_saves)
    assert (outcome.written, outcome.attempts) == (True, 2)
    text = doc.read_text()
    assert "my own line" in text and [s.harvest_source for s in read_document(doc).auto_sections()] == ["t/a"]


def test_a_document_that_keeps_changing_gives_up(tmp_path: Path) -> None:
    doc = tmp_path / "d.dlm"
    doc.write_text(FM)
    counter = iter(range(100))

    def always_saving() -> None:
        doc.write_text(FM + f"\nsave {next(counter)}\n")

    with pytest.raises(ConflictError, match="3 attempts"):
        update_document(doc, add_probe("a"), max_attempts=3, before_replace=always_saving)
    assert "t/a" not in doc.read_text()


def test_creation_never_clobbers_a_file_that_appeared_meanwhile(tmp_path: Path) -> None:
    doc = tmp_path / "new.dlm"
    appeared = []

    def someone_creates_it() -> None:
        if not appeared:
            appeared.append(1)
            doc.write_text(FM + "\nwritten first by someone else\n")

    outcome = update_document(
        doc, add_probe("a"), create=lambda: new_document("smollm2-135m", path=doc), before_replace=someone_creates_it
    )
    assert outcome.attempts == 2
    assert "written first by someone else" in doc.read_text() and "t/a" in doc.read_text()
    assert read_document(doc).frontmatter.dlm_id == "01KPPJZWBDDDYRESSA0HESRDHS"


def test_a_malformed_document_is_refused_untouched(tmp_path: Path) -> None:
    doc = tmp_path / "d.dlm"
    doc.write_text(FM + "::bogus::\n")
    with pytest.raises(DocumentError, match=":7: unknown section fence"):
        update_document(doc, add_probe("a"))
    assert doc.read_text() == FM + "::bogus::\n"


@pytest.mark.parametrize(
    ("question", "answer", "reason"),
    [
        ("How do I write a probe?\n### Q\nlike this", "cat doc.dlm", "the question has a line '### Q'"),
        ("Show a pair", "### A", "the answer has a line '### A'"),
        ("Mark a probe", "echo\n  ### Q !probe  ", "the answer has a line '### Q !probe'"),
    ],
)
def test_a_body_line_that_reads_as_a_header_is_refused_by_name(question: str, answer: str, reason: str) -> None:
    with pytest.raises(UnrepresentableError, match=re.escape(reason)):
        probe_section(question, answer, source="learnerd/x")
