"""The training data a .dlm document holds, before any tokenizer or chat template touches it.

Mirrors dlm's ``src/dlm/data/sections_to_rows.py``: a prose section gives one text row (its content,
stripped; blank prose gives none), an ``::instruction::`` section one chat row per Q/A pair (a
``!probe`` pair trains like any other). ``::preference::`` and media sections give no rows here.
"""

from __future__ import annotations

from dataclasses import dataclass

from learnerd.store.dlm.document import Document


@dataclass(frozen=True)
class TextRow:
    """Continued-pretraining text from a prose section."""

    section_id: str
    text: str


@dataclass(frozen=True)
class ChatRow:
    """One user/assistant exchange from an instruction section; ``probe`` marks a ``### Q !probe`` pair."""

    section_id: str
    question: str
    answer: str
    probe: bool


def training_rows(document: Document) -> list[TextRow | ChatRow]:
    """Every row of ``document``, in document order.

    Raises:
        DocumentError: an instruction section breaks the Q/A grammar (file and line in the message).
    """
    rows: list[TextRow | ChatRow] = []
    for section in document.sections:
        if section.type == "prose":
            text = section.content.strip()
            if text:
                rows.append(TextRow(section.section_id, text))
        elif section.type == "instruction":
            sid = section.section_id
            rows += [ChatRow(sid, p.question, p.answer, p.probe) for p in section.qa_pairs(path=document.path)]
    return rows
