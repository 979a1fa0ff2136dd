"""Judges: is a response a correct answer to a question, given the reference answer — and why.

:class:`MatchJudge` (the default, offline) decides in this order:

1. **empty** — a response with no letter or digit is wrong;
2. **text** — both texts are normalised the way SQuAD's evaluation script does it (Unicode NFKC,
   lower case, every run of characters that are not letters or digits is a word break, the articles
   *a*, *an*, *the* dropped); the response is correct when the reference's words appear in it as one
   contiguous run (so "Paris" answers "Paris, the capital of France." correctly: length is the
   composite score's business, not the judge's);
3. **numbers** — when the reference contains numbers, the response is correct when each of them is
   matched by a number in the response: exactly for a plain integer (a count, a year), within the
   relative ``numeric_tolerance`` for an amount (a number with a decimal point, a currency sign, or a
   percent sign, e.g. FinanceBench's ``$1,577.00``); thousands separators are ignored.

:class:`LLMJudge` asks a chat model on an OpenAI-compatible endpoint for ``{"correct": bool,
"explanation": str}`` under a strict JSON schema (:mod:`learnerd.steering.chat`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Protocol

from learnerd.steering.chat import StructuredChatError, structured_chat

_WORD = re.compile(r"[^\W_]+")
_ARTICLES = frozenset({"a", "an", "the"})
_NUMBER = re.compile(r"(?P<cur>[$€£¥])?\s?(?P<num>[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?P<pct>\s?%)?")


class JudgeError(RuntimeError):
    """The judge could not decide (an LLM judge's endpoint failed or gave no valid verdict)."""


@dataclass(frozen=True)
class Verdict:
    """``correct`` and a one-sentence ``explanation`` of why."""

    correct: bool
    explanation: str


class Judge(Protocol):
    name: str

    def judge(self, question: str, reference: str, response: str) -> Verdict: ...


def normalise(text: str) -> list[str]:
    """SQuAD-style words of ``text`` (see the module docstring)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    return [w for w in words if w not in _ARTICLES]


@dataclass(frozen=True)
class _Number:
    value: float
    amount: bool
    text: str


def numbers_in(text: str) -> list[_Number]:
    """The numbers written in ``text``; ``amount`` when written with a decimal point, currency or percent."""
    found = []
    for m in _NUMBER.finditer(unicodedata.normalize("NFKC", text)):
        raw = m.group("num")
        found.append(
            _Number(
                float(raw.replace(",", "")), bool(m.group("cur") or m.group("pct") or "." in raw), m.group(0).strip()
            )
        )
    return found


class MatchJudge:
    """Normalised match with numeric tolerance (module docstring). Deterministic, no network."""

    name = "match"

    def __init__(self, numeric_tolerance: float = 0.01) -> None:
        if not 0 <= numeric_tolerance < 1:
            raise ValueError("numeric_tolerance must be in [0, 1)")
        self.numeric_tolerance = numeric_tolerance

    def judge(self, question: str, reference: str, response: str) -> Verdict:
        said, want = normalise(response), normalise(reference)
        if not said:
            return Verdict(False, "the response is empty")
        if want and _contains(said, want):
            how = "matches the reference" if said == want else "contains the reference"
            return Verdict(True, f"the response {how} {reference!r}")
        expected = numbers_in(reference)
        if expected:
            got = numbers_in(response)
            missing = [n.text for n in expected if not any(self._close(n, g.value) for g in got)]
            if not missing:
                return Verdict(
                    True, f"every number of the reference ({', '.join(n.text for n in expected)}) is in the response"
                )
            return Verdict(False, f"the response lacks the reference's number(s) {', '.join(missing)}")
        return Verdict(False, f"the response does not contain the reference {reference!r}")

    def _close(self, expected: _Number, value: float) -> bool:
        if not expected.amount:
            return value == expected.value
        return abs(value - expected.value) <= self.numeric_tolerance * abs(expected.value)


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"correct": {"type": "boolean"}, "explanation": {"type": "string"}},
    "required": ["correct", "explanation"],
    "additionalProperties": False,
}
JUDGE_SYSTEM = (
    "You grade answers. Given a question, a reference answer and a response, decide whether the response "
    "gives the reference answer (extra words are fine; a wrong, missing or contradictory answer is not; "
    "numbers may differ by rounding). Reply with JSON: correct (boolean) and explanation (one sentence)."
)


class LLMJudge:
    """A chat model as the judge (module docstring).

    Args:
        client: an ``openai.OpenAI`` client (:func:`learnerd.steering.chat.make_client`).
        model: the model name sent with each request.
        max_attempts: requests per verdict before :class:`JudgeError`.
    """

    name = "llm"

    def __init__(self, client: Any, model: str, max_attempts: int = 3) -> None:
        self.client = client
        self.model = model
        self.max_attempts = max_attempts

    def judge(self, question: str, reference: str, response: str) -> Verdict:
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {
                "role": "user",
                "content": f"Question:\n{question}\n\nReference answer:\n{reference}\n\nResponse:\n{response}",
            },
        ]
        try:
            return structured_chat(
                self.client,
                model=self.model,
                messages=messages,
                name="verdict",
                schema=JUDGE_SCHEMA,
                parse=_parse_verdict,
                max_attempts=self.max_attempts,
            )
        except StructuredChatError as exc:
            raise JudgeError(str(exc)) from exc


def _parse_verdict(raw: Any) -> Verdict:
    if not isinstance(raw, dict) or set(raw) != {"correct", "explanation"}:
        raise ValueError("expected exactly the keys correct and explanation")
    if not isinstance(raw["correct"], bool) or not isinstance(raw["explanation"], str):
        raise ValueError("correct must be a boolean and explanation a string")
    return Verdict(raw["correct"], raw["explanation"].strip())
