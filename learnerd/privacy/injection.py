"""Text that addresses the model instead of describing a task: the prompt-injection rule.

OWASP's LLM01 (Prompt Injection, OWASP Top 10 for LLM Applications 2025) names indirect injection —
instructions hidden in data a model later reads — as the risk; learnerd's retrieval puts one person's logged
context into another person's prompt. The defence that matters is structural: retrieved examples are put
into prompts as quoted data, never as turns of their own (:mod:`learnerd.ml.retrieved_examples`). This rule
is the second line: an intent or a command that reads as instructions to a model is never learned.

The text is normalized first (:func:`normalize`), so a spelling does not slip past it: Unicode NFKC
(full-width letters, ligatures), format characters removed (zero-width spaces and joiners, soft hyphens,
bidirectional controls), confusable letters of other scripts folded to the Latin letters they imitate (the
Unicode confusables table, through ``confusable-homoglyphs``: Cyrillic ``о`` → ``o``), letters spaced or
dotted apart joined (``i g n o r e``, ``i.g.n.o.r.e``), case folded, whitespace collapsed. The phrasings
(:data:`PHRASINGS`) are then searched in the normalized text: telling the model to disregard what it was
told (in English and the common phrasings of French, Spanish, Portuguese, Italian, German, Dutch, Polish,
Russian, Turkish, Chinese, Japanese, Korean), to take a new role or mode, to reveal its instructions,
new "system" instructions, and chat-template role markers.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_DISREGARD = (
    r"(?:ignore|disregard|forget|override|overrule|bypass|skip|drop|discard|abandon|neglect|dismiss|erase|delete"
    r"|wipe|clear|set aside|throw (?:out|away)|pay no (?:attention|heed) to|do not (?:follow|obey|heed)"
    r"|don'?t (?:follow|obey|heed)|stop (?:following|obeying)|no longer (?:follow|obey))"
)
_TOLD = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|orders|commands|constraints"
    r"|guardrails|restrictions|polic(?:y|ies)|safety|programming|system prompt|context|messages"
    r"|what (?:you(?:'ve| have)? (?:were|was|been|are) )?"
    r"(?:told|given|said|instructed|asked)|everything (?:above|before|said|you know)|all (?:of )?(?:the )?above"
    r"|the above|above text|prior text|previous text)"
)
PHRASINGS: tuple[tuple[str, str], ...] = (
    ("tells the model to disregard its instructions", rf"\b{_DISREGARD}\b[^.!?\n]{{0,40}}?\b{_TOLD}\b"),
    (
        "tells the model to disregard its instructions",
        rf"\b{_DISREGARD}\s+(?:all|everything)\b[^.!?\n]{{0,30}}\b(?:before|above|prior|previously|earlier)\b",
    ),
    (
        "says the model's instructions changed",
        r"\b(?:new|updated|real|actual|true|revised|secret|hidden)\s+(?:system\s+)?(?:instructions?|prompt"
        r"|directives?|rules)\s*(?::|follow|are|is)",
    ),
    (
        "says the model's instructions changed",
        r"\b(?:your|the)\s+(?:instructions|rules|prompt)\s+(?:have|has)\s+(?:changed|been (?:updated|replaced|changed"
        r"|revoked))",
    ),
    (
        "gives the model a new role",
        r"\byou are (?:now|no longer|actually|henceforth)\b(?! (?:in|at|on|inside|logged|connected|ready|done|able)\b)",
    ),
    ("gives the model a new role", r"\bfrom now on,? (?:you|act|respond|answer|reply|always|only|never|ignore)\b"),
    (
        "gives the model a new role",
        r"\b(?:pretend|act|behave|roleplay|role-play) (?:to be|as if you|like you|that you are"
        r"|as (?:an? )?(?:unrestricted|unfiltered|jailbroken|evil|dan|different|new) )",
    ),
    (
        "gives the model a new role",
        r"\b(?:god|jailbreak|jailbroken|dan|unrestricted|unfiltered|unrestrained) mode\b",
    ),
    ("gives the model a new role", r"\bdo anything now\b|\bjailbreak(?:ing)? (?:the|this|yourself|you)\b"),
    (
        "asks the model to reveal its instructions",
        r"\b(?:reveal|print|show|repeat|output|display|leak|tell me|dump|recite|write out)\b[^.!?\n]{0,25}"
        r"\b(?:(?:your|its)\s+(?:system\s+prompt|(?:initial|hidden|secret|original|system)\s+(?:instructions|prompt"
        r"|message)|instructions)|the\s+(?:system\s+prompt|(?:initial|hidden|secret|original)\s+(?:instructions"
        r"|prompt))\s+(?:you|verbatim|above|word for word))",
    ),
    ("speaks as the system", r"\bsystem\s*(?:note|override|message|prompt|instruction|update|alert)\s*:"),
    (
        "tells the model what to answer",
        r"\b(?:always|only)\s+(?:answer|respond|reply|output|return|suggest)\s+with\s+(?:the command|this command"
        r"|commands?\b|[`\"']|this\b|the attacker)",
    ),
    (
        "tells the model what to answer",
        r"\bwhen(?:ever)? (?:you are |you're )?asked\b[^.!?\n]{0,60}\b(?:answer|respond|reply|output|say)\b",
    ),
    (
        "tells the model what to answer",
        r"\b(?:assistant|ai|model|llm|chatbot|copilot|claude|gpt)s?\s*[,:]\s*(?:ignore|you must|always|never"
        r"|from now on)\b",
    ),
    (
        "carries a chat-template role marker",
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|start_header_id|end_header_id|eot_id)\|?>",
    ),
    (
        "carries a chat-template role marker",
        r"\[/?inst\]|<</?sys>>|</?(?:system|instructions?)>|\bbegin (?:system|instructions)\b",
    ),
    ("carries a chat-template role marker", r"(?m)^\s*(?:#+\s*)?(?:system|assistant)\s*:"),
    # the common phrasings of other languages: "ignore / forget the previous instructions"
    (
        "tells the model to disregard its instructions",
        r"\b(?:ignore[zs]?|oublie[zs]?|ne tiens pas compte)\b[^.!?\n]{0,30}\b(?:instructions?|consignes?|regles"
        r"|règles)\b",
    ),
    (
        "tells the model to disregard its instructions",
        r"\b(?:ignora|ignore|olvida|olvide|omite|esqueça|esqueca|ignorar|dimentica|ignorate)\b[^.!?\n]{0,30}"
        r"\b(?:instrucciones|instruções|instrucoes|istruzioni|indicaciones|reglas|regole|regras)\b",
    ),
    (
        "tells the model to disregard its instructions",
        r"\b(?:ignoriere|ignorieren sie|vergiss|vergessen sie|missachte)\b[^.!?\n]{0,30}\b(?:anweisungen|anweisung"
        r"|regeln|befehle|vorgaben)\b",
    ),
    (
        "tells the model to disregard its instructions",
        r"\b(?:negeer|vergeet)\b[^.!?\n]{0,30}\b(?:instructies|regels|opdrachten)\b",
    ),
    (
        "tells the model to disregard its instructions",
        r"\b(?:zignoruj|zapomnij|pomiń)\b[^.!?\n]{0,30}\b(?:instrukcje|polecenia|zasady)\b",
    ),
    (
        "tells the model to disregard its instructions",
        r"(?:игнорируй|игнорируйте|забудь|забудьте|не обращай внимания на)[^.!?\n]{0,30}(?:инструкци|указани|правил)",
    ),
    (
        "tells the model to disregard its instructions",
        r"\b(?:önceki|tüm|onceki|tum)\b[^.!?\n]{0,20}\b(?:talimatları|talimatlari|talimatlar)\b[^.!?\n]{0,20}"
        r"\b(?:yok say|unut|görmezden gel|gormezden gel)",
    ),
    (
        "tells the model to disregard its instructions",
        r"(?:忽略|无视|忘记|忘掉|無視|忘記)[^。！？\n]{0,12}(?:指令|指示|说明|規則|规则|提示)",
    ),
    ("tells the model to disregard its instructions", r"(?:指示|命令|ルール|プロンプト)[^。！？\n]{0,12}(?:無視|忘れ)"),
    ("tells the model to disregard its instructions", r"(?:지시|지침|명령|규칙)[^.!?\n]{0,12}(?:무시|잊어)"),
)
"""``(reason, regex searched in the normalized text)``: the phrasings refused (see the module docstring)."""

_SPACED = re.compile(r"(?<![\w])(?:\w[ .\-_*·|/]){2,}\w(?![\w])")
_INVISIBLE = {c: None for c in (0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFFA0)}


@functools.lru_cache(maxsize=4096)
def _latin(ch: str) -> str:
    """The Latin letter ``ch`` (a letter of another script) is confusable with, or ``ch``."""
    from confusable_homoglyphs import confusables

    found = confusables.is_confusable(ch, preferred_aliases=["latin"], greedy=True)
    for entry in found or ():
        for glyph in entry["homoglyphs"]:
            c = glyph["c"]
            if len(c) == 1 and c.isascii() and c.isalpha():
                return "I" if c == "l" and ch.isupper() else c  # the table's prototype of capital I is l
    return ch


def normalize(text: str) -> str:
    """``text`` normalized for the rule (see the module docstring): NFKC, format characters removed,
    confusables folded to Latin, spaced-out letters joined, case folded, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf").translate(_INVISIBLE)
    text = "".join(_fold(word) for word in re.split(r"(\s+)", text))
    text = _SPACED.sub(lambda m: re.sub(r"[ .\-_*·|/]", "", m.group(0)), text)
    return (
        " ".join(text.casefold().split())
        if "\n" not in text
        else "\n".join(" ".join(line.casefold().split()) for line in text.split("\n"))
    )


def _fold(word: str) -> str:
    """A word written mostly in Latin letters with a few look-alikes of another script (``ignоre``) in Latin;
    a word of another script (Russian, Greek) kept as it is."""
    if word.isascii() or not any(c.isalpha() for c in word):
        return word
    letters = [c for c in word if c.isalpha()]
    latin = sum(1 for c in letters if c.isascii())
    if latin == 0 and len(letters) > 1:
        folded = "".join(_latin(c) for c in word)
        return folded if folded.isascii() and len(letters) <= 3 else word
    return "".join(c if c.isascii() else _latin(c) for c in word)


class InjectionRule:
    """The phrasings of :data:`PHRASINGS`, compiled; :meth:`refusal` judges one text."""

    def __init__(self) -> None:
        self._phrasings = [(reason, re.compile(p, re.IGNORECASE)) for reason, p in PHRASINGS]

    def refusal(self, text: str) -> str | None:
        """Why ``text`` reads as instructions to a model (``"tells the model to … ('ignore previous instr')"``),
        or None."""
        if not text.strip():
            return None
        for candidate in dict.fromkeys((text, normalize(text))):
            for reason, pattern in self._phrasings:
                match = pattern.search(candidate)
                if match is not None:
                    return f"{reason} ({match.group(0).strip()[:40]!r})"
        return None
