"""An adapter version's manifest: written atomically, read back as written, refused when damaged or newer,
and its learned sections traced to the block and log line their example came from."""

import json

import pytest

from learnerd.store import db
from learnerd.store.blocks import BlockEvent, Cell, LineOrigin, apply_event
from learnerd.store.manifest import (
    MANIFEST_FILE,
    Manifest,
    ManifestError,
    SectionOrigin,
    document_origins,
    read_manifest,
    section_origins,
    sections_with_rows,
    session_of,
    write_manifest,
)


def manifest(**kw) -> Manifest:
    values = dict(
        doc_key="01KDOC",
        created_at="2026-11-25T16:00:00+00:00",
        mode="incremental",
        reason="1 new section(s) (2 rows), 1 rows replayed",
        base_model="learnerd/tiny-llama",
        parent_version=1,
        previous_version=1,
        steps=3,
        start_loss=2.5,
        final_loss=0.25,
        losses=(2.0, 1.0, 0.5),
        sections=(
            SectionOrigin("aaaa", rows=1),
            SectionOrigin("bbbb", 2, "learnerd/blk-1", "blk-1", "blk-1", "/logs/a.jsonl", 3, 10.0, "learnerd"),
        ),
        added=("bbbb",),
        replayed=("aaaa",),
        removed=(SectionOrigin("cccc", 1, "learnerd/blk-0", "blk-0", "blk-0", "/logs/a.jsonl", 1, 5.0, "learnerd"),),
    )
    values.update(kw)
    return Manifest(**values)


def test_a_written_manifest_reads_back_equal_with_the_directorys_version(tmp_path):
    path = write_manifest(tmp_path, manifest())
    assert path == tmp_path / MANIFEST_FILE and [p.name for p in tmp_path.iterdir()] == [MANIFEST_FILE]
    assert "version" not in json.loads(path.read_text()), "the directory's name says the version"
    back = read_manifest(tmp_path, 7)
    assert back == manifest(version=7)
    assert [s.example_id for s in back.added_origins()] == ["blk-1"] and back.example_ids() == {"blk-1"}
    assert back.section("bbbb").line == 3 and back.section("cccc") is None


def test_a_version_without_a_manifest_has_none(tmp_path):
    assert read_manifest(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not a readable manifest"),
        ("[]", "a JSON object is expected, not list"),
        ('{"schema_version": 2}', "schema_version 2"),
        ('{"schema_version": 1, "doc_key": "d"}', "not a readable manifest"),
    ],
)
def test_a_damaged_or_newer_manifest_is_refused_with_its_path(tmp_path, text, needle):
    (tmp_path / MANIFEST_FILE).write_text(text)
    with pytest.raises(ManifestError, match=needle) as caught:
        read_manifest(tmp_path)
    assert str(tmp_path / MANIFEST_FILE) in str(caught.value)


def test_learned_sections_are_traced_to_their_block_and_log_line(tmp_path):
    target = tmp_path / "learnerd.db"
    conn = db.connect(target)
    with db.transaction(conn):
        run = BlockEvent("blk-1", "learnerd", 42.0, executed=Cell("code", "kubectl get pods"), exit_code=0)
        apply_event(conn, run, now=50.0, origin=LineOrigin("/logs/a.jsonl", 3))
    markers = {"s1": "learnerd/blk-1", "s2": "rpc-inject/disk", "s3": "learnerd/gone"}
    origins = section_origins(conn, markers)
    conn.close()
    assert origins["s1"] == SectionOrigin(
        "s1", 0, "learnerd/blk-1", "blk-1", "blk-1", "/logs/a.jsonl", 3, 42.0, "learnerd"
    )
    assert origins["s2"] == SectionOrigin("s2", source="rpc-inject/disk"), "not an example: its marker alone"
    assert origins["s3"] == SectionOrigin("s3", source="learnerd/gone", example_id="gone", block_id="gone")
    assert document_origins(target, markers) == origins, "the same through a connection of its own"
    assert document_origins(tmp_path / "absent.db", markers)["s1"].file is None
    assert not (tmp_path / "absent.db").exists(), "no store is created to look examples up in"


def test_every_section_gets_an_entry_with_its_rows_and_a_persons_a_bare_one():
    origins = {"b": SectionOrigin("b", source="learnerd/x", example_id="x")}
    entries = sections_with_rows(["a", "b"], {"a": 3, "b": 1}, origins)
    assert entries == (SectionOrigin("a", rows=3), SectionOrigin("b", 1, "learnerd/x", "x"))


def test_the_session_of_a_session_readers_block_is_in_its_id():
    assert session_of("claude-code:5f1c:toolu_01", "claude-code") == "5f1c"
    assert session_of("nb-k8s-1", "learnerd") is None and session_of("atuin:17", "atuin") is None
    assert session_of("codex:s1:call_1", "claude-code") is None, "another reader's id is not parsed"
