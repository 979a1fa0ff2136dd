"""learnerd.store.forget on a real SQLite store, real .dlm documents and real foyle files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from learnerd.store import db, foyle_examples, suggestions
from learnerd.store.blocks import BlockEvent, Cell, LineOrigin, apply_event
from learnerd.store.dlm import Section, new_document, probe_section, read_document
from learnerd.store.embeddings import count_vectors, put_vectors
from learnerd.store.examples import Example, get_example, put_example
from learnerd.store.forget import NothingToForget, documents_in, forget_in_files, forget_in_store
from learnerd.store.probe_journal import InjectedProbe, ProbeJournal
from learnerd.store.suggestions import ServedAnswer
from learnerd.store.tombstones import load_tombstones

PODS = Example("b-pods", "List the pods in the dev namespace", "kubectl get pods -n dev", "bash", 1.0)
DISK = Example("b-disk", "Show disk usage", "du -sh .", "bash", 2.0)


@pytest.fixture
def state(tmp_path: Path) -> tuple[object, Path, Path]:
    conn = db.connect(tmp_path / "db.sqlite")
    with db.transaction(conn):
        for example in (PODS, DISK):
            put_example(conn, example)
        put_vectors(conn, [PODS.id, DISK.id], np.eye(2, 4, dtype=np.float32), "m", ["h1", "h2"], 1.0)
    docs, export = tmp_path / "docs", tmp_path / "foyle"
    docs.mkdir()
    document = new_document("builtin:tiny-llama", prose="# Learned")
    for example in (PODS, DISK):
        section = probe_section(example.query, example.answer, source=f"learnerd/{example.id}")
        document = document.append_section(section)
    # a harvest's reinforcement copy: the same pair under a plain ### Q, another tool's marker
    reinforced = probe_section(PODS.query, PODS.answer, source="eval-harvest/probe_recall")
    plain = tuple(line.replace(" !probe", "") for line in reinforced.body)
    document = document.append_section(replace(reinforced, body=plain))
    (docs / "learned.dlm").write_bytes(document.to_bytes())
    hand = new_document("builtin:tiny-llama").append_section(
        Section("instruction", ("### Q", PODS.query, "", "### A", PODS.answer))
    )
    (docs / "mine.dlm").write_bytes(hand.to_bytes())
    for example in (PODS, DISK):
        foyle_examples.write_if_changed(foyle_examples.example_path(export, example.id), b"x")
    return conn, docs, export


def sources(path: Path) -> list[str | None]:
    return [s.harvest_source for s in read_document(path).sections if s.fenced]


def test_a_dry_run_reports_everything_and_changes_nothing(state):
    conn, docs, export = state
    before = {p: p.read_bytes() for p in docs.iterdir()}
    report = forget_in_store(conn, "match", "get pods -n dev", dry_run=True)
    forget_in_files(report, documents_in([docs]), export)
    assert [e.id for e in report.examples] == ["b-pods"] and report.vectors == 1
    assert report.documents == {str(docs / "learned.dlm"): 2} and report.retrain == [str(docs / "learned.dlm")]
    assert report.export_files == [str(export / "b-pods.example.binpb")]
    assert {p: p.read_bytes() for p in docs.iterdir()} == before
    assert get_example(conn, "b-pods") is not None and count_vectors(conn) == 2
    assert load_tombstones(conn).all == () and (export / "b-pods.example.binpb").exists()


def test_forget_takes_the_example_back_everywhere_but_hand_written_sections(state):
    conn, docs, export = state
    report = forget_in_store(conn, "match", "get pods -n dev", now=7.0)
    forget_in_files(report, documents_in([docs]), export)
    assert get_example(conn, "b-pods") is None and get_example(conn, "b-disk") == DISK
    assert report.vectors == 1 and count_vectors(conn) == 1
    assert sources(docs / "learned.dlm") == ["learnerd/b-disk"], "its section and the harvest's copy are gone"
    assert sources(docs / "mine.dlm") == [None], "a person's own section is never touched"
    assert sorted(p.name for p in export.iterdir()) == ["b-disk.example.binpb"]
    assert report.to_json()["tombstone"] == {
        "id": report.tombstone.id,
        "kind": "match",
        "value": "get pods -n dev",
        "block_ids": ["b-pods"],
        "created_at": 7.0,
    }
    assert load_tombstones(conn).all == (report.tombstone,)


def test_an_unknown_id_is_refused_and_a_block_without_example_still_gets_a_tombstone(state):
    conn, _, _ = state
    with pytest.raises(NothingToForget, match="no example or block has the id 'nope'"):
        forget_in_store(conn, "example", "nope")
    conn.execute("INSERT INTO blocks (id, source, created_at, updated_at) VALUES ('b-new', 'test', 1, 1)")
    report = forget_in_store(conn, "block", "b-new")
    assert report.examples == [] and report.tombstone.block_ids == ("b-new",)
    assert [t.value for t in load_tombstones(conn).all] == ["b-new"]


def test_a_document_that_does_not_parse_is_named_and_the_others_are_still_rewritten(state):
    conn, docs, export = state
    broken = docs / "broken.dlm"
    broken.write_text("---\nnot: [closed\n---\n")
    report = forget_in_files(forget_in_store(conn, "example", "b-pods"), documents_in([docs]), export)
    assert list(report.errors) == [str(broken)] and broken.read_text() == "---\nnot: [closed\n---\n"
    assert report.documents == {str(docs / "learned.dlm"): 2}


def test_a_match_takes_back_the_served_answers_holding_the_text_and_keeps_their_counts(state):
    conn, _, _ = state
    served = [
        ServedAnswer("doc", "v0001", "s1", (("user", "pods?"),), "kubectl get pods -n dev", (), 5.0),
        ServedAnswer("doc", "v0001", "s2", (("user", "disk?"),), "du -sh .", (), 6.0),
    ]
    with db.transaction(conn):
        ids = [suggestions.record(conn, answer, 6.0) for answer in served]
    dry = forget_in_store(conn, "match", "get pods -n dev", dry_run=True)
    assert dry.suggestions == 1 and suggestions.get_suggestion(conn, ids[0]) is not None
    report = forget_in_store(conn, "match", "get pods -n dev")
    assert report.suggestions == 1 and report.to_json()["suggestions"] == 1
    assert suggestions.get_suggestion(conn, ids[0]) is None and suggestions.get_suggestion(conn, ids[1]) is not None
    assert suggestions.counts(conn)["doc"]["v0001"]["served"] == 2, "the counts hold no text and stay"


@pytest.mark.parametrize("text", ["", " ", "   \t\n", "e", "ab c", "a\u00a0b c"])
def test_a_match_of_fewer_than_four_non_space_characters_is_refused_and_nothing_is_written(state, text: str):
    conn, _, _ = state
    with pytest.raises(ValueError, match=r"(at least 4 non-space characters|empty)"):
        forget_in_store(conn, "match", text)
    assert get_example(conn, "b-pods") == PODS and load_tombstones(conn).all == ()


def test_a_match_removes_the_injected_probes_holding_it_from_documents_and_the_journal(state, tmp_path: Path):
    """Probes pushed with RPC ``inject_probe`` are no examples: a ``match`` takes back their sections
    (``rpc-inject/…``) and every line of them in the probe journal, pending or already written."""
    conn, docs, export = state
    journal = ProbeJournal(tmp_path / "journals" / "injected-probes.jsonl")
    secret, kept = "deploy with token ZX81", "list the pods"
    written = InjectedProbe(InjectedProbe.new_id(), str(docs / "learned.dlm"), f"How do I {secret}?", "make deploy")
    pending = InjectedProbe(InjectedProbe.new_id(), str(docs / "learned.dlm"), f"{secret} now", "make deploy")
    other = InjectedProbe(InjectedProbe.new_id(), str(docs / "learned.dlm"), kept, "kubectl get pods")
    journal.append([written, pending, other])
    journal.consume([written.id])
    document = read_document(docs / "learned.dlm").append_section(
        probe_section(written.prompt, written.reference, source=written.harvest_source)
    )
    (docs / "learned.dlm").write_bytes(document.to_bytes())
    report = forget_in_store(conn, "match", secret)
    assert report.examples == []
    forget_in_files(report, documents_in([docs]), export, journal)
    assert report.documents == {str(docs / "learned.dlm"): 1} and report.journal_probes == 1
    assert secret not in (docs / "learned.dlm").read_text() and "learnerd/b-pods" in sources(docs / "learned.dlm")
    assert [p.id for p in journal.pending()] == [other.id]
    text = journal.path.read_text()
    assert secret not in text and kept in text
    journal.close()
    assert [p.id for p in ProbeJournal(journal.path).pending()] == [other.id], "the file holds what memory does"


def test_a_source_forgets_the_blocks_read_from_it_even_once_the_file_is_gone(state, tmp_path: Path):
    """The analyzer records the file and line each executed cell was read from: a ``source`` forget finds
    those blocks by the path, whatever the file holds now (rotated away, deleted)."""
    conn, _, _ = state
    log = tmp_path / "logs" / "rollout.jsonl"
    with db.transaction(conn):
        apply_event(conn, BlockEvent("b-pods", "codex", 1.0, executed=Cell("code", PODS.answer)), 2.0,
                    LineOrigin(str(log), 3))  # fmt: skip
    report = forget_in_store(conn, "source", str(log))
    assert [e.id for e in report.examples] == ["b-pods"] and report.tombstone.block_ids == ("b-pods",)
