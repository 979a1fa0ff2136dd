"""What the probes feed the model: a document's probes, prompts and sections as token ids.

Text is encoded the way training encodes it (:mod:`learnerd.ml.rows`), so the evaluation measures what
the adapter was trained on:

* a question is a prompt rendered through the tokenizer's chat template — after the document's
  ``system_prompt`` as the system message when it has one, as the trainer renders chat rows — with the
  assistant header appended (``add_generation_prompt``); a base without a chat template gets the
  question's text and a line break instead;
* a question/answer pair is scored on the answer's tokens only — for a chat template exactly the
  assistant span the trainer puts loss on (answer and end-of-turn token);
* prose is scored on every token but the first (nothing predicts it), with the EOS token appended.

sway's general-knowledge items (``calibration_drift``) are plain-text completions instead, encoded as sway's
HF backend encodes them (:meth:`Encoder.completion`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from learnerd.ml.rows import IGNORE_INDEX, ChatMessage, TrainingRow, encode_row, has_chat_template, render_chat
from learnerd.store.dlm import Document

PromptSource = Literal["probe", "instruction", "prose"]
SectionKind = Literal["instruction", "prose"]
MAX_PROMPT_CHARS = 200
"""A prompt taken from prose is its first line, clipped to this many characters."""


@dataclass(frozen=True)
class Scored:
    """A continuation to score: ``target`` token ids after ``context`` token ids (both non-empty)."""

    context: tuple[int, ...]
    target: tuple[int, ...]


@dataclass(frozen=True)
class Encoder:
    """Turns text into token ids for one tokenizer; sequences are cut to ``max_length`` tokens; ``system``
    is the system message every conversation starts with (None: none)."""

    tokenizer: Any
    max_length: int = 2048
    system: str | None = None

    @property
    def chat(self) -> bool:
        """Whether the tokenizer has a chat template."""
        return has_chat_template(self.tokenizer)

    def prompt(self, question: str) -> tuple[int, ...]:
        """The ids a model answers ``question`` from."""
        if self.chat:
            return self.dialogue([ChatMessage("user", question)])
        return tuple(self.tokenizer(question + "\n")["input_ids"])

    def dialogue(self, messages: Sequence[ChatMessage]) -> tuple[int, ...]:
        """The ids of a conversation (after the system message) ending in the assistant header (needs a
        chat template)."""
        system = [ChatMessage("system", self.system)] if self.system else []
        return tuple(render_chat(self.tokenizer, [*system, *messages], add_generation_prompt=True))

    def text_prompt(self, text: str) -> tuple[int, ...]:
        """The ids of plain ``text`` to continue (BOS where the tokenizer adds one)."""
        return tuple(self.tokenizer(text)["input_ids"])[: self.max_length]

    def pair(self, question: str, answer: str) -> Scored:
        """``answer`` scored after ``question`` (the trainer's assistant span with a chat template)."""
        if self.chat:
            row = encode_row(
                self.tokenizer, TrainingRow.chat("eval", question, answer, system=self.system), self.max_length
            )
            span = [i for i, label in enumerate(row.labels) if label != IGNORE_INDEX] or [len(row.labels)]
            return _scored(row.input_ids[: span[0]], row.input_ids[span[0] : span[-1] + 1])
        answer_ids = [*self.tokenizer(answer, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        return _scored(self.prompt(question), answer_ids)

    def completion(self, prompt: str, completion: str) -> Scored:
        """``completion`` scored after plain-text ``prompt``, tokenized as sway 0.1.0's HF backend does
        (``backends/hf.py`` ``logprob_of``): the ids of ``prompt + completion`` (BOS where the tokenizer adds
        one), the first ``len(ids(prompt))`` of them the context, the rest the target.

        Raises:
            ValueError: ``completion`` adds no token.
        """
        context = len(self.tokenizer(prompt)["input_ids"])
        full = list(self.tokenizer(prompt + completion)["input_ids"])
        return _scored(full[:context], full[context:])

    def text(self, text: str) -> Scored:
        """``text`` scored on every token but the first."""
        ids = encode_row(self.tokenizer, TrainingRow.plain("eval", text), self.max_length).input_ids
        return _scored(ids[:1], ids[1:])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` without special tokens."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))


def token_estimate(text: str) -> int:
    """sway 0.1.0's per-token normaliser of a gold completion: ``max(1, len(text) // 4)``, in characters
    (``probes/calibration_drift.py`` and ``probes/paraphrase_invariance.py`` ``_token_estimate``)."""
    return max(1, len(text) // 4)


def _scored(context: Sequence[int], target: Sequence[int]) -> Scored:
    if not context or not target:
        raise ValueError("nothing to score: the sequence is empty after truncation")
    return Scored(tuple(context), tuple(target))


@dataclass(frozen=True)
class ProbePair:
    """One distinct ``### Q !probe`` pair of the document.

    ``name`` (``recall_`` + 12 hex digits of the pair's sha256) is stable across document edits and
    adapter versions; ``section_id`` is the first section holding the pair; ``harvested`` says whether a
    section holding it carries an auto-harvest marker of the evaluation's tag.
    """

    name: str
    question: str
    answer: str
    section_id: str
    harvested: bool


@dataclass(frozen=True)
class Prompt:
    """A prompt for the divergence probes: its ``text``, where it came from, and its ``ids``."""

    text: str
    source: PromptSource
    ids: tuple[int, ...]


@dataclass(frozen=True)
class SectionInputs:
    """One trainable section: its own scored text, and what other sections' leak checks use.

    ``own``: the section's Q/A pairs (at most ``max_pairs``) or its prose; ``question``: the first question
    (None for prose), the context other sections' text is scored in for this section's leak check;
    ``text``: what stands for this section in other sections' leak checks (its first answer, or its prose).
    """

    section_id: str
    kind: SectionKind
    tag: str
    own: tuple[Scored, ...]
    question: str | None
    text: str


@dataclass(frozen=True)
class DocumentInputs:
    """Everything the probes take from one document, encoded by ``encoder``; ``pairs``: every distinct
    ``(question, answer)`` of its instruction sections, probe or not, in document order."""

    encoder: Encoder
    probes: tuple[ProbePair, ...]
    prompts: tuple[Prompt, ...]
    sections: tuple[SectionInputs, ...]
    pairs: tuple[tuple[str, str], ...] = ()


def probe_name(question: str, answer: str) -> str:
    """``recall_`` and 12 hex digits of sha256 over the pair (stable, unique per distinct pair)."""
    return "recall_" + hashlib.sha256(f"{question}\n\x00{answer}".encode()).hexdigest()[:12]


def document_inputs(
    document: Document,
    tokenizer: Any,
    *,
    max_prompts: int = 8,
    max_pairs: int = 8,
    max_prose_chars: int = 2000,
    harvest_tag: str = "auto-harvest",
) -> DocumentInputs:
    """Read ``document``'s ``!probe`` pairs (distinct, in document order), up to ``max_prompts`` prompts
    (probe questions, then other questions, then the first line of each prose section), its
    instruction and prose sections, encoded for ``tokenizer``, and all its distinct Q/A pairs.

    Raises:
        DocumentError: an instruction section breaks the Q/A grammar.
    """
    fm = document.frontmatter
    encoder = Encoder(tokenizer, fm.training.sequence_len, fm.system_prompt)
    probes: dict[tuple[str, str], ProbePair] = {}
    questions: dict[str, PromptSource] = {}
    openings: list[str] = []
    sections: list[SectionInputs] = []
    harvested_pairs: set[tuple[str, str]] = set()
    all_pairs: dict[tuple[str, str], None] = {}
    for section in document.sections:
        source = section.harvest_source or ""
        if section.type == "instruction":
            pairs = section.qa_pairs(path=document.path)
            if source.startswith(harvest_tag + "/"):
                harvested_pairs |= {(p.question, p.answer) for p in pairs}
            for p in pairs:
                all_pairs[p.question, p.answer] = None
                if p.probe:
                    key = (p.question, p.answer)
                    probes.setdefault(key, ProbePair(probe_name(*key), *key, section.section_id, False))
                    questions[p.question] = "probe"
                else:
                    questions.setdefault(p.question, "instruction")
            own = tuple(encoder.pair(p.question, p.answer) for p in pairs[:max_pairs])
            sections.append(
                SectionInputs(section.section_id, "instruction", source, own, pairs[0].question, pairs[0].answer)
            )
        elif section.type == "prose" and section.content.strip():
            text = section.content.strip()[:max_prose_chars]
            openings.append(text.splitlines()[0][:MAX_PROMPT_CHARS])
            sections.append(SectionInputs(section.section_id, "prose", source, (encoder.text(text),), None, text))
    ranked = [q for q, s in questions.items() if s == "probe"] + [q for q, s in questions.items() if s != "probe"]
    prompts = [Prompt(q, questions[q], encoder.prompt(q)) for q in ranked]
    prompts += [Prompt(o, "prose", encoder.text_prompt(o)) for o in dict.fromkeys(openings) if o.strip()]
    return DocumentInputs(
        encoder=encoder,
        probes=tuple(
            ProbePair(p.name, p.question, p.answer, p.section_id, (p.question, p.answer) in harvested_pairs)
            for p in probes.values()
        ),
        prompts=tuple(prompts[:max_prompts]),
        sections=tuple(sections),
        pairs=tuple(all_pairs),
    )
