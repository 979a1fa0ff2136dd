"""The .dlm document model against dlm's real documents and its grammar."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from learnerd.store.dlm import (
    CURRENT_DLM_VERSION,
    ChatRow,
    DocumentError,
    QAPair,
    TextRow,
    harvest_marker,
    new_document,
    new_ulid,
    parse_bytes,
    parse_text,
    probe_section,
    read_document,
    training_rows,
)

FM = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: smollm2-135m\n---\n"


def doc(body: str) -> str:
    return FM + "\n" + body


def peer_documents(peer_data: Path) -> list[Path]:
    return sorted((peer_data / "dlm").rglob("*.dlm"))


def test_every_peer_document_round_trips_byte_identical(peer_data: Path) -> None:
    paths = peer_documents(peer_data)
    assert len(paths) == 10
    for path in paths:
        data = path.read_bytes()
        document = parse_bytes(data, path=path)
        assert document.to_bytes() == data, path
        assert document.sections, path
        for section in document.sections:
            if section.type == "instruction":
                assert section.qa_pairs(path=path), path


def test_section_ids_equal_sways_per_section_ids(peer_data: Path) -> None:
    document = read_document(peer_data / "dlm/audit/the-doc.dlm")
    report = json.loads((peer_data / "dlm/audit/sway-results.json").read_text())
    (sis,) = [p for p in report["probes"] if p["kind"] == "section_internalization"]
    reported = [(e["section_id"], e["kind"]) for e in sis["evidence"]["per_section"]]
    ours = [(s.section_id, s.type) for s in document.sections]
    assert len(reported) == 41
    assert sum(1 for r in reported if r in ours) == 41
    assert ours == reported


def test_section_id_is_sha256_of_type_and_content_without_marker() -> None:
    body = "### Q\nWhat?\n\n### A\nThat.\n"
    plain = parse_text(doc(f"::instruction::\n{body}")).sections[0]
    marked = parse_text(doc(f"::instruction::\n{harvest_marker('t/x')}\n{body}")).sections[0]
    expected = hashlib.sha256(b"instruction\n### Q\nWhat?\n\n### A\nThat.").hexdigest()[:16]
    assert plain.section_id == marked.section_id == expected
    assert marked.harvest_source == "t/x" and marked.markers and plain.harvest_source is None


def test_gallery_frontmatter_training_block(peer_data: Path) -> None:
    fm = read_document(peer_data / "dlm/gallery/shell-one-liner.dlm").frontmatter
    assert fm.dlm_id == "01KPPJZWBDDDYRESSA0HESRDHS" and fm.dlm_version == 1
    assert fm.base_model == "qwen2.5-coder-1.5b"
    t = fm.training
    # `learning_rate: 2e-4` is a YAML 1.1 string; dlm (pydantic) coerces it, so do we.
    assert (t.lora_r, t.lora_alpha, t.lora_dropout, t.sequence_len, t.learning_rate) == (8, 16, 0.05, 1024, 2e-4)
    assert (t.num_epochs, t.seed, t.micro_batch_size, t.warmup_ratio) == (3, 42, "auto", 0.1)
    assert fm.system_prompt and fm.system_prompt.startswith("You produce POSIX-first")
    assert fm.raw["export"]["default_temperature"] == 0.2  # keys learnerd does not use are kept
    audit = read_document(peer_data / "dlm/audit/the-doc.dlm").frontmatter
    assert audit.dlm_version == 15 and audit.training.micro_batch_size == 2
    assert len(audit.training.extra["sources"]) == 3


def test_defaults_when_training_is_absent() -> None:
    t = parse_text(FM).frontmatter.training
    assert (t.adapter, t.lora_r, t.lora_alpha, t.lora_dropout, t.sequence_len) == ("lora", 8, 16, 0.05, 2048)
    assert (t.learning_rate, t.num_epochs, t.seed, t.target_modules) == (2e-4, 3, 42, "auto")


@pytest.mark.parametrize(
    ("yaml_text", "line", "words"),
    [
        ("dlm_id: nope\nbase_model: x\n", 2, "ULID"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\n", 2, "base_model"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ndlm_version: 99\n", 4, "dlm_version"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ntraining:\n  seed: 1\n  lora_r: 0\n", 6, "lora_r"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ntraining:\n  lora_dropout: 0.9\n", 5, "lora_dropout"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ntraining:\n  sequence_len: 32\n", 5, "sequence_len"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ntraining:\n  learning_rate: 0\n", 5, "learning_rate"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\ntraining:\n  adapter: full\n", 5, "adapter"),
        ("dlm_id: [unclosed\n", 2, "YAML"),
        ("dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\nbad: : :\n", 4, "YAML"),
        ("- a list\n", 2, "mapping"),
    ],
)
def test_frontmatter_errors_name_the_line(yaml_text: str, line: int, words: str) -> None:
    with pytest.raises(DocumentError) as err:
        parse_text(f"---\n{yaml_text}---\nbody\n", path="x.dlm")
    assert err.value.line == line and words in err.value.message
    assert str(err.value).startswith(f"x.dlm:{line}: ")


def test_unknown_frontmatter_keys_are_kept_and_round_trip() -> None:
    text = FM.replace("---\n", "---\nfuture_key: {a: 1}\n", 1) + "\nprose\n"
    document = parse_text(text)
    assert document.frontmatter.raw["future_key"] == {"a": 1}
    assert document.to_text() == text


def test_missing_frontmatter_and_bad_utf8_are_refused_with_a_line() -> None:
    with pytest.raises(DocumentError, match=":1: expected '---'"):
        parse_text("no frontmatter\n")
    with pytest.raises(DocumentError, match="no closing"):
        parse_text("---\ndlm_id: x\n")
    with pytest.raises(DocumentError) as err:
        parse_bytes(FM.encode() + b"\nfine\n\xff\xfe\n")
    assert err.value.line == 7


def test_fences_inside_code_blocks_do_not_count() -> None:
    body = "intro\n```markdown\n::instruction::\n### Q\n```\n::instruction::\n### Q\nq\n### A\na\n"
    sections = parse_text(doc(body)).sections
    assert [s.type for s in sections] == ["prose", "instruction"]
    assert "::instruction::" in sections[0].content


def test_section_ends_at_next_fence_or_eof_and_whitespace_prose_is_no_section() -> None:
    document = parse_text(doc("\n\n::instruction::\n### Q\nq\n### A\na\n::prose::\ntext\n::preference::\nx\n"))
    assert [s.type for s in document.sections] == ["instruction", "prose", "preference"]
    assert document.sections[0].content == "### Q\nq\n### A\na"
    assert document.sections[0].start_line == 8


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("::foo::\n", 6, "unknown section fence"),
        ("x\n::instruction#Bad::\n", 7, "adapter"),
        ("::image::\n", 6, "needs attributes"),
        ('::image alt="x"::\n', 6, "needs attribute"),
        ("x\n```\nunclosed\n", 7, "unterminated"),
        ('::instruction::\n<!-- dlm-auto-synth: synth_teacher="x" -->\n', 7, "marker"),
    ],
)
def test_malformed_bodies_are_refused_with_their_line(body: str, line: int, words: str) -> None:
    with pytest.raises(DocumentError) as err:
        parse_text(doc(body))
    assert err.value.line == line and words in err.value.message


def test_adapter_and_media_fences() -> None:
    document = parse_text(doc('::instruction#tone::\n### Q\nq\n### A\na\n::image path="a.png" alt="x"::\ncaption\n'))
    inst, image = document.sections
    assert inst.adapter == "tone" and inst.fence_line == "::instruction#tone::"
    assert image.attrs == (("path", "a.png"), ("alt", "x"))
    assert image.section_id == hashlib.sha256(b"image\na.png").hexdigest()[:16]


def test_qa_pairs_and_probe_flag() -> None:
    body = "::instruction::\n### Q !probe\nfirst?\n\n### A\none\n\n```sh\nls\n```\n### Q\nsecond?\n### A\ntwo\n"
    pairs = parse_text(doc(body)).sections[0].qa_pairs()
    assert pairs == [QAPair("first?", "one\n\n```sh\nls\n```", probe=True), QAPair("second?", "two", probe=False)]


@pytest.mark.parametrize(
    ("qa", "line", "words"),
    [
        ("### Q\n\n### A\na\n", 8, "### Q body is empty"),
        ("### Q\nq\n### A\n\n", 10, "### A body is empty"),
        ("### Q\nq\n", 8, "without a matching"),
        ("### Q\nq\n### Q\nr\n### A\na\n", 10, "two questions in a row"),
        ("text first\n### Q\nq\n### A\na\n", 8, "expected `### Q`"),
        ("\n\n", 8, "no ### Q / ### A pairs"),
    ],
)
def test_qa_grammar_errors_carry_the_file_line(qa: str, line: int, words: str) -> None:
    section = parse_text(doc(f"::instruction::\n{harvest_marker('a/b')}\n{qa}"), path="d.dlm").sections[0]
    with pytest.raises(DocumentError) as err:
        section.qa_pairs(path="d.dlm")
    assert (err.value.line, err.value.path) == (line, Path("d.dlm")) and words in err.value.message


def test_crlf_and_bom_documents_round_trip_with_the_same_ids() -> None:
    lf = doc("prose\n::instruction::\n### Q\nq\n### A\na\n")
    crlf = "\ufeff" + lf.replace("\n", "\r\n")
    a, b = parse_text(lf), parse_bytes(crlf.encode())
    assert b.to_bytes() == crlf.encode() and b.newline == "\r\n"
    assert [s.section_id for s in a.sections] == [s.section_id for s in b.sections]
    added = b.append_section(probe_section("x?", "y", source="t/n"))
    assert b"\r\n::instruction::\r\n" in added.to_bytes() and b"\n::instruction::\n" not in added.to_bytes()


def test_edits_never_touch_other_sections() -> None:
    original = doc("prose\n::instruction::\n### Q\nq\n### A\na")  # no final newline
    document = parse_text(original)
    ids = [s.section_id for s in document.sections]
    first = probe_section("one?", "1", source="t/one")
    added = parse_text(document.append_section(first).to_text())
    assert [s.section_id for s in added.sections][:2] == ids
    assert added.sections[2].harvest_source == "t/one"
    replaced = parse_text(added.upsert_auto_section(probe_section("one?", "uno", source="t/one")).to_text())
    assert [s.section_id for s in replaced.sections][:2] == ids and len(replaced.sections) == 3
    assert replaced.sections[2].qa_pairs()[0].answer == "uno"
    appended = replaced.upsert_auto_section(probe_section("two?", "2", source="t/two"))
    assert [s.harvest_source for s in appended.auto_sections()] == ["t/one", "t/two"]
    assert [s.harvest_source for s in appended.remove_auto_sections("t/one").auto_sections()] == ["t/two"]
    stripped = appended.strip_auto_sections()
    assert stripped.to_text() == original + "\n"  # the only byte that changed: the final newline added for a successor


def test_strip_and_append_restore_the_exact_bytes(peer_data: Path) -> None:
    data = (peer_data / "dlm/gallery/coding-tutor.dlm").read_bytes()
    document = parse_bytes(data)
    for i in range(3):
        document = document.append_section(probe_section(f"q{i}?", f"a{i}", source=f"t/{i}"))
    assert parse_bytes(document.to_bytes()).strip_auto_sections().to_bytes() == data


def test_new_document_is_valid_with_a_fresh_ulid(tmp_path: Path) -> None:
    a = new_document("smollm2-135m", prose="# Title", training={"lora_r": 16}, path=tmp_path / "n.dlm")
    b = new_document("smollm2-135m")
    assert (
        re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", a.frontmatter.dlm_id) and a.frontmatter.dlm_id != b.frontmatter.dlm_id
    )
    assert a.frontmatter.dlm_version == CURRENT_DLM_VERSION and a.frontmatter.training.lora_r == 16
    assert parse_bytes(a.to_bytes()).to_bytes() == a.to_bytes()
    prose_id = a.sections[0].section_id
    assert (
        parse_text(a.append_section(probe_section("q?", "a", source="t/x")).to_text()).sections[0].section_id
        == prose_id
    )
    assert new_ulid(0.0).startswith("0000000000")
    with pytest.raises(DocumentError, match="lora_r"):
        new_document("x", training={"lora_r": 0})


def test_training_rows() -> None:
    document = parse_text(doc("# Title\n\n::instruction::\n### Q !probe\nq?\n### A\na\n### Q\nr?\n### A\nb\n"))
    prose, inst = document.sections
    assert training_rows(document) == [
        TextRow(prose.section_id, "# Title"),
        ChatRow(inst.section_id, "q?", "a", True),
        ChatRow(inst.section_id, "r?", "b", False),
    ]
    broken = parse_text(doc("::instruction::\n### Q\nq\n"), path="b.dlm")
    with pytest.raises(DocumentError, match=r"b\.dlm:7"):
        training_rows(broken)
