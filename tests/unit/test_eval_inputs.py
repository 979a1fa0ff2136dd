"""What the probes feed the model, on the built-in byte-level tokenizer (no weights needed)."""

from __future__ import annotations

import pytest

from learnerd.eval.inputs import Encoder, document_inputs, probe_name
from learnerd.ml.rows import TrainingRow, encode_row
from learnerd.ml.tiny_model import build_tokenizer
from learnerd.store.dlm import parse_text

FM = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
DOC = FM + (
    "# Notes on rivers\nThe Nile is long.\n\n"
    "::instruction::\n### Q !probe\nLongest river?\n\n### A\nThe Nile\n\n### Q\nWettest river?\n\n### A\nThe Amazon\n\n"
    "::instruction::\n### Q !probe\nLongest river?\n\n### A\nThe Nile\n\n"  # the same probe again: counted once
    '::instruction::\n<!-- dlm-auto-harvest: source="auto-harvest/x" -->\n### Q\nLongest river?\n\n### A\nThe Nile\n\n'
)


@pytest.fixture(scope="module")
def chat_tokenizer():
    return build_tokenizer(chat_template=True)


def test_probes_are_distinct_and_named_by_content(chat_tokenizer):
    inputs = document_inputs(parse_text(DOC), chat_tokenizer)
    assert [(p.question, p.answer) for p in inputs.probes] == [("Longest river?", "The Nile")]
    probe = inputs.probes[0]
    assert probe.name == probe_name("Longest river?", "The Nile") and probe.name.startswith("recall_")
    assert probe.harvested  # a section with an auto-harvest/ marker holds the pair
    assert probe.section_id == parse_text(DOC).sections[1].section_id
    assert not document_inputs(parse_text(DOC), chat_tokenizer, harvest_tag="other").probes[0].harvested


def test_prompts_put_probe_questions_first_then_other_questions_then_prose(chat_tokenizer):
    inputs = document_inputs(parse_text(DOC), chat_tokenizer)
    assert [(p.text, p.source) for p in inputs.prompts] == [
        ("Longest river?", "probe"),
        ("Wettest river?", "instruction"),
        ("# Notes on rivers", "prose"),
    ]
    assert len(document_inputs(parse_text(DOC), chat_tokenizer, max_prompts=2).prompts) == 2
    assert [s.kind for s in inputs.sections] == ["prose", "instruction", "instruction", "instruction"]
    assert inputs.sections[1].question == "Longest river?" and inputs.sections[0].question is None


def test_a_pair_is_scored_on_exactly_the_span_training_puts_loss_on(chat_tokenizer):
    encoder = Encoder(chat_tokenizer)
    scored = encoder.pair("Longest river?", "The Nile")
    row = encode_row(chat_tokenizer, TrainingRow.chat("s", "Longest river?", "The Nile"), 2048)
    assert list(scored.context) + list(scored.target) == list(row.input_ids)
    assert list(scored.target) == [label for label in row.labels if label != -100]
    assert scored.context == encoder.prompt("Longest river?")
    assert chat_tokenizer.decode(list(scored.target)) == "The Nile<|eot_id|>"
    text = encoder.text("Flowing water.")
    assert chat_tokenizer.decode(list(text.context)) == "<|begin_of_text|>"
    assert chat_tokenizer.decode(list(text.target)) == "Flowing water.<|end_of_text|>"


def test_without_a_chat_template_a_question_is_plain_text():
    tokenizer = build_tokenizer(chat_template=False)
    encoder = Encoder(tokenizer)
    assert not encoder.chat
    assert tokenizer.decode(list(encoder.prompt("Why?"))) == "<|begin_of_text|>Why?\n"
    scored = encoder.pair("Why?", "Because")
    assert tokenizer.decode(list(scored.target)) == "Because<|end_of_text|>"


def test_the_system_prompt_comes_first_as_in_training(chat_tokenizer):
    document = parse_text(FM.replace("---\n", "---\nsystem_prompt: Answer tersely.\n", 1) + "Prose.\n")
    encoder = document_inputs(document, chat_tokenizer).encoder
    assert encoder.system == "Answer tersely."
    row = encode_row(chat_tokenizer, TrainingRow.chat("s", "Q?", "A.", system="Answer tersely."), 2048)
    scored = encoder.pair("Q?", "A.")
    assert list(scored.context) + list(scored.target) == list(row.input_ids)
    assert chat_tokenizer.decode(list(encoder.prompt("Q?"))).count("Answer tersely.") == 1
