"""Training rows → token ids and loss masks on the tiny byte-level tokenizer."""

from __future__ import annotations

import pytest

from learnerd.ml.rows import (
    IGNORE_INDEX,
    ChatMessage,
    RowEncodingError,
    TrainingRow,
    encode_row,
    encode_rows,
    padding_id,
    render_chat,
)
from learnerd.ml.tiny_model import EOS, EOT, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _learned_text(tokenizer, enc) -> str:
    return tokenizer.decode([label for label in enc.labels if label != IGNORE_INDEX])


def test_chat_row_learns_the_answer_and_its_end_of_turn_only(tokenizer):
    enc = encode_row(tokenizer, TrainingRow.chat("s1", "What is 2+2?", "Four", system="Be brief."), 512)
    assert _learned_text(tokenizer, enc) == "Four" + EOT
    assert len(enc.input_ids) == len(enc.labels)
    assert enc.loss_tokens == len(b"Four") + 1
    # The rendered prompt (system + user + assistant header) carries no loss.
    prompt = render_chat(
        tokenizer,
        [ChatMessage("system", "Be brief."), ChatMessage("user", "What is 2+2?")],
        add_generation_prompt=True,
    )
    assert list(enc.input_ids[: len(prompt)]) == prompt
    assert set(enc.labels[: len(prompt)]) == {IGNORE_INDEX}


def test_multi_turn_row_learns_every_assistant_turn(tokenizer):
    row = TrainingRow(
        "m1",
        messages=(
            ChatMessage("user", "Hi"),
            ChatMessage("assistant", "Hello"),
            ChatMessage("user", "Bye"),
            ChatMessage("assistant", "Ciao"),
        ),
    )
    enc = encode_row(tokenizer, row, 512)
    assert _learned_text(tokenizer, enc) == "Hello" + EOT + "Ciao" + EOT


def test_plain_row_learns_every_token_and_ends_with_eos(tokenizer):
    enc = encode_row(tokenizer, TrainingRow.plain("p1", "héllo"), 512)
    assert enc.input_ids == enc.labels
    assert enc.input_ids[0] == tokenizer.bos_token_id and enc.input_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(enc.input_ids[1:-1]) == "héllo" and EOS in tokenizer.decode(enc.input_ids)
    assert enc.loss_tokens == len("héllo".encode()) + 1


def test_truncation_and_dropping_rows_without_loss(tokenizer):
    long_prompt = TrainingRow.chat("long", "x" * 200, "answer")
    enc, dropped = encode_rows(tokenizer, [long_prompt, TrainingRow.plain("p", "short")], max_length=64)
    assert [e.section_id for e in enc] == ["p"] and dropped == ["long"]
    assert len(encode_row(tokenizer, TrainingRow.plain("p", "y" * 300), 64).input_ids) == 64


def test_chat_row_needs_a_chat_template():
    with pytest.raises(RowEncodingError, match="no chat template"):
        encode_row(build_tokenizer(chat_template=False), TrainingRow.chat("s", "q", "a"), 512)


def test_row_validation_and_json_round_trip():
    with pytest.raises(ValueError, match="exactly one"):
        TrainingRow("x")
    with pytest.raises(ValueError, match="no assistant message"):
        TrainingRow("x", messages=(ChatMessage("user", "q"),))
    for row in (TrainingRow.chat("a", "q", "r", system="s"), TrainingRow.plain("b", "t")):
        assert TrainingRow.from_dict(row.to_dict()) == row


def test_document_rows_strip_the_probe_mark_and_carry_the_system_prompt():
    from learnerd.ml.rows import document_rows
    from learnerd.store.dlm import parse_text

    document = parse_text(
        "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\nsystem_prompt: Be brief.\n---\n"
        "# Title\n\n::instruction::\n### Q !probe\nq?\n### A\na\n### Q\nr?\n### A\nb\n"
    )
    prose, inst = document.sections
    assert document_rows(document) == [
        TrainingRow.plain(prose.section_id, "# Title"),
        TrainingRow.chat(inst.section_id, "q?", "a", system="Be brief."),
        TrainingRow.chat(inst.section_id, "r?", "b", system="Be brief."),
    ]
    assert all("!probe" not in m.content for row in document_rows(document)[1:] for m in row.messages)


def test_padding_id_takes_the_pad_token_then_the_eos_token_then_the_least_eos_id(tokenizer):
    from types import SimpleNamespace

    assert tokenizer.pad_token_id is not None
    assert padding_id(tokenizer, {tokenizer.pad_token_id + 1}) == tokenizer.pad_token_id
    assert padding_id(SimpleNamespace(pad_token_id=None, eos_token_id=7), {3, 5}) == 7
    assert padding_id(SimpleNamespace(pad_token_id=None, eos_token_id=None), {5, 3}) == 3
    assert padding_id(SimpleNamespace(pad_token_id=None, eos_token_id=None)) == 0
