"""Training rows and how they become token ids and loss masks.

A :class:`TrainingRow` is one unit of a document's training signal, tagged with the id of the section
it came from (dlm's section id, so an adapter's metadata can say exactly what it was trained on);
:func:`document_rows` makes them from a parsed .dlm document:

* a **chat** row — messages rendered through the tokenizer's chat template; the loss covers the
  assistant turns only (their tokens up to and including the template's end-of-turn token), so the
  adapter learns to answer, not to ask;
* a **plain** row — prose, tokenized as-is with the tokenizer's own special tokens (BOS for Llama-style
  tokenizers) and the EOS token appended; the loss covers every token.

The assistant span of a chat row is found by rendering the conversation up to each assistant turn with
``add_generation_prompt=True`` and up to the end of that turn; the token counts of those renderings bound
the span. This is exact for any template whose rendering of a prefix of the conversation is a prefix
of the rendering of the whole (true of every common template); :class:`RowEncodingError` otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from learnerd.store.dlm import ChatRow, Document, training_rows

IGNORE_INDEX = -100
"""Label of a token that carries no loss (PyTorch's ``cross_entropy`` default ``ignore_index``)."""


class RowEncodingError(ValueError):
    """A row the tokenizer cannot encode as asked (e.g. a chat row on a base without a chat template)."""


class ChatMessage(NamedTuple):
    """One turn of a conversation: ``role`` is ``system``, ``user`` or ``assistant``."""

    role: str
    content: str


@dataclass(frozen=True)
class TrainingRow:
    """One training example. Exactly one of ``messages`` (chat) and ``text`` (plain) is set."""

    section_id: str
    messages: tuple[ChatMessage, ...] | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.text is None):
            raise ValueError("a TrainingRow has exactly one of messages and text")
        if self.messages is not None and not any(m.role == "assistant" for m in self.messages):
            raise ValueError(f"chat row {self.section_id} has no assistant message to learn")

    @classmethod
    def chat(cls, section_id: str, prompt: str, answer: str, system: str | None = None) -> TrainingRow:
        """A single-turn Q/A row: optional system message, the user's ``prompt``, the assistant's ``answer``."""
        turns = [ChatMessage("user", prompt), ChatMessage("assistant", answer)]
        if system:
            turns.insert(0, ChatMessage("system", system))
        return cls(section_id=section_id, messages=tuple(turns))

    @classmethod
    def plain(cls, section_id: str, text: str) -> TrainingRow:
        """A prose row: loss on every token."""
        return cls(section_id=section_id, text=text)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``messages`` as a list of ``{"role", "content"}``); inverse of :meth:`from_dict`."""
        if self.messages is not None:
            return {"section_id": self.section_id, "messages": [m._asdict() for m in self.messages]}
        return {"section_id": self.section_id, "text": self.text}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainingRow:
        messages = raw.get("messages")
        return cls(
            section_id=raw["section_id"],
            messages=tuple(ChatMessage(m["role"], m["content"]) for m in messages) if messages is not None else None,
            text=raw.get("text"),
        )


def document_rows(document: Document) -> list[TrainingRow]:
    """The training rows of a parsed .dlm document, in document order: each Q/A pair a chat row (the
    ``!probe`` mark dropped: a probe trains like any other pair) with the frontmatter's ``system_prompt``
    as its system message when there is one, each prose section a plain row. Which sections give rows is
    :func:`learnerd.store.dlm.training_rows` (dlm's ``sections_to_rows``).

    Raises:
        DocumentError: an instruction section breaks the Q/A grammar (file and line in the message).
    """
    system = document.frontmatter.system_prompt
    return [
        TrainingRow.chat(row.section_id, row.question, row.answer, system=system)
        if isinstance(row, ChatRow)
        else TrainingRow.plain(row.section_id, row.text)
        for row in training_rows(document)
    ]


def system_prompt(rows: Iterable[TrainingRow]) -> str | None:
    """The first system message of ``rows``' chat rows (the document's ``system_prompt``), or None."""
    return next((m.content for r in rows if r.messages for m in r.messages if m.role == "system"), None)


@dataclass(frozen=True)
class EncodedRow:
    """A row as token ids: ``labels[i]`` is ``input_ids[i]`` where token i carries loss, else :data:`IGNORE_INDEX`."""

    section_id: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def loss_tokens(self) -> int:
        """Tokens that carry loss (the first token never does: nothing predicts it)."""
        return sum(1 for label in self.labels[1:] if label != IGNORE_INDEX)


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (chat rows need one)."""
    return bool(getattr(tokenizer, "chat_template", None))


def padding_id(tokenizer: Any, eos_ids: Iterable[int] = ()) -> int:
    """The token id a batch is padded with: ``tokenizer.pad_token_id``, else its ``eos_token_id``, else the least of
    ``eos_ids`` (a model's generation EOS ids), else 0. Padded positions are masked out of attention and loss, so any id
    would do; the trainer, the evaluation and the endpoint take it in this one order."""
    for candidate in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(candidate, int):
            return candidate
    return min(eos_ids, default=0)


def render_chat(tokenizer: Any, messages: Sequence[ChatMessage], add_generation_prompt: bool = False) -> list[int]:
    """Token ids of ``messages`` rendered through the tokenizer's chat template.

    With ``add_generation_prompt`` the ids end with the template's assistant header: the prompt to
    generate an answer from. Special tokens come from the template only (none are added on top).

    Raises:
        RowEncodingError: the tokenizer has no chat template.
    """
    if not has_chat_template(tokenizer):
        raise RowEncodingError("the base model's tokenizer has no chat template; chat rows need one")
    text = tokenizer.apply_chat_template(
        [m._asdict() for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_row(tokenizer: Any, row: TrainingRow, max_length: int) -> EncodedRow:
    """Token ids and labels of ``row``, truncated to ``max_length`` tokens (the sequence length).

    Raises:
        RowEncodingError: a chat row on a tokenizer without a chat template, or a template whose
            rendering of a conversation prefix is not a token prefix of the whole.
    """
    if row.text is not None:
        ids = list(tokenizer(row.text)["input_ids"])
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
        ids = ids[:max_length]
        return EncodedRow(row.section_id, tuple(ids), tuple(ids))
    assert row.messages is not None
    full = render_chat(tokenizer, row.messages)
    labels = [IGNORE_INDEX] * len(full)
    for i, message in enumerate(row.messages):
        if message.role != "assistant":
            continue
        prefix = render_chat(tokenizer, row.messages[:i], add_generation_prompt=True)
        through = render_chat(tokenizer, row.messages[: i + 1])
        start = len(prefix)
        if through[:start] != prefix or full[: len(through)] != through:
            raise RowEncodingError(
                f"row {row.section_id}: the chat template does not render conversation prefixes as token prefixes"
            )
        labels[start : len(through)] = full[start : len(through)]
    return EncodedRow(row.section_id, tuple(full[:max_length]), tuple(labels[:max_length]))


def encode_rows(tokenizer: Any, rows: Iterable[TrainingRow], max_length: int) -> tuple[list[EncodedRow], list[str]]:
    """Encode ``rows``; a row left with no loss token after truncation is dropped.

    Returns:
        ``(encoded, dropped_section_ids)``.

    Raises:
        RowEncodingError: as :func:`encode_row`.
    """
    encoded: list[EncodedRow] = []
    dropped: list[str] = []
    for row in rows:
        enc = encode_row(tokenizer, row, max_length)
        if enc.loss_tokens:
            encoded.append(enc)
        else:
            dropped.append(row.section_id)
    return encoded, dropped
