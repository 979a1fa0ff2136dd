"""Property tests (hypothesis) for the .dlm parser and serializer."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from learnerd.store.dlm import (
    DocumentError,
    QAPair,
    UnrepresentableError,
    harvest_marker,
    parse_bytes,
    parse_text,
    probe_section,
)
from learnerd.store.dlm.qa import normalize_turn

FRONTMATTER = ["---", "dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS", "base_model: smollm2-135m", "---"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Lines that exercise the grammar: fences, headers, markers, code fences, blanks and look-alikes.
tricky_lines = st.sampled_from(
    [
        "",
        "   ",
        "::instruction::",
        "::prose::",
        "::preference::",
        "::instruction#tone::",
        '::image path="a.png"::',
        "### Q",
        "### Q !probe",
        "### A",
        "  ### A  ",
        "```",
        "```sh",
        harvest_marker("learnerd/01ABC"),
        harvest_marker("auto-harvest/x"),
        "---",
        ":: not a fence ::",
        "\ufeffbom inside",
        "# heading",
    ]
)
plain_lines = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=30).filter(
    lambda s: not s.startswith(("::", "```"))
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """A document: valid frontmatter, then lines mixing the grammar's tokens with free text, balanced
    code blocks, and any mix of LF / CRLF / CR line ends; sometimes a BOM, sometimes no final newline."""
    body: list[str] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind < 4:
            body.append(draw(tricky_lines))
        elif kind < 9:
            body.append(draw(plain_lines))
        else:  # a closed code block may hold anything, fences included
            body += ["```", *draw(st.lists(st.one_of(tricky_lines, plain_lines), max_size=4)), "```"]
    if body.count("```") % 2 or sum(1 for line in body if line.startswith("```")) % 2:
        body.append("```")
    lines = FRONTMATTER + body
    ends = draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(lines), max_size=len(lines)))
    text = "".join(line + end for line, end in zip(lines, ends, strict=True))
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    if draw(st.integers(0, 9)) == 0:
        text = "\ufeff" + text
    return text.encode("utf-8")


@SETTINGS
@given(documents())
def test_random_documents_round_trip(data: bytes) -> None:
    try:
        document = parse_bytes(data)
    except DocumentError as exc:
        assert exc.line >= 1
        assume(False)
    assert document.to_bytes() == data
    # an edit leaves every other section as it was
    added = parse_bytes(document.append_section(probe_section("q?", "a", source="t/new")).to_bytes())
    before = [(s.type, s.section_id, s.harvest_source) for s in document.sections]
    assert [(s.type, s.section_id, s.harvest_source) for s in added.sections[: len(before)]] == before
    assert added.sections[-1].harvest_source == "t/new"
    assert parse_bytes(added.to_bytes()).strip_auto_sections("t/new").sections == document.sections


@SETTINGS
@given(st.binary(max_size=400), st.sampled_from([b"", b"---\n", b"---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\n"]))
@example(b"base_model: x\n---\n```", b"---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\n")
@example(b"a: 2001-13-45\n---\n", b"---\n")
def test_random_bytes_parse_or_raise_the_documented_error(tail: bytes, head: bytes) -> None:
    data = head + tail
    try:
        document = parse_bytes(data)
    except DocumentError as exc:
        assert exc.line >= 1 and str(exc).startswith(f"<text>:{exc.line}: ")
        return
    assert document.to_bytes() == data
    for section in document.sections:
        if section.type == "instruction":
            try:
                section.qa_pairs()
            except DocumentError as exc:
                assert exc.line >= 1


turn_text = st.lists(
    st.one_of(
        st.text(st.characters(blacklist_categories=["Cs"]), max_size=8),
        st.sampled_from(["\n", "\r\n", "### Q", "### A", "```", "::instruction::", "\n```\n", " ", "\u2028"]),
    ),
    max_size=10,
).map("".join)


@SETTINGS
@given(turn_text, turn_text)
@example("list files", "```sh\nls -la\n```")
@example("q", "### A")
@example("q", "x\n::instruction::\ny")
def test_probe_sections_parse_back_to_exactly_their_pair_or_are_refused(question: str, answer: str) -> None:
    try:
        section = probe_section(question, answer, source="learnerd/ex")
    except UnrepresentableError:
        return
    base = parse_text("\n".join(FRONTMATTER) + "\n\nhand-written prose\n")
    document = parse_bytes(
        base.append_section(section).append_section(probe_section("n?", "m", source="t/2")).to_bytes()
    )
    assert [s.harvest_source for s in document.sections] == [None, "learnerd/ex", "t/2"]
    assert document.sections[1].qa_pairs() == [QAPair(normalize_turn(question), normalize_turn(answer), probe=True)]
