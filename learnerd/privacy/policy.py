"""What is never learned, however often a person ran it: dangerous commands, and contexts that read as
instructions to the model.

**Commands** (:data:`DANGEROUS_COMMANDS`, plus ``[privacy] deny_commands``): a recursive delete of ``/``,
``~`` or ``$HOME``; ``mkfs``; ``dd`` onto a device; a fork bomb; a download piped (or substituted) into a
shell; ``chmod -R 777 /``. Such an executed cell stays a block (the log is the log) but never becomes an
example, so it reaches no vector, no document, no adapter and no few-shot prompt.

**Prompt injection** (:data:`INJECTION_PATTERNS`): OWASP's LLM01 (Prompt Injection, OWASP Top 10 for LLM
Applications 2025) names indirect injection — instructions hidden in data a model later reads — as the
risk; learnerd's retrieval puts one person's logged context into another person's prompt, so a context
that addresses the model ("ignore all previous instructions", "you are now …", "new system prompt") or
carries chat-template role markers (``<|im_start|>``, ``[INST]``, ``<|system|>``, a line ``system:``) is
refused as an example. Retrieved examples are also put into prompts as quoted data, never as turns of their
own (see :mod:`learnerd.api.openai_app`), the second half of OWASP's advice (segregate untrusted content).
"""

from __future__ import annotations

import re

from learnerd.privacy.settings import PrivacyConfig

_RM_RECURSIVE = r"\brm\s+(?:-{1,2}[\w-]+\s+)*?(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:-{1,2}[\w-]+\s+)*"
_ROOTS = r"(?:/|/\*|~|~/|~/\*|\$HOME|\$\{HOME\}|\"\$HOME\"|\$HOME/\*?)"

DANGEROUS_COMMANDS: tuple[tuple[str, str], ...] = (
    ("recursive delete of /, ~ or $HOME", rf"{_RM_RECURSIVE}(?:\S+\s+)*?{_ROOTS}(?=\s|$|;|&|\|)"),
    ("mkfs (formats a file system)", r"\bmkfs(?:\.\w+)?\b"),
    ("dd onto a device", r"\bdd\b[^|;&\n]*\bof=/dev/"),
    ("fork bomb", r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
    ("a download piped into a shell", r"\b(?:curl|wget|fetch)\b[^|;\n]*\|\s*(?:sudo\s+)?(?:\w*/)?(?:ba|z|da|k|c)?sh\b"),
    ("a download run by a shell", r"\b(?:ba|z|da|k)?sh\s+(?:-c\s+)?[\"']?(?:<\(|\$\()\s*(?:curl|wget)\b"),
    ("chmod -R 777 /", r"\bchmod\s+(?:-\w+\s+)*-\w*R\w*\s+(?:-\w+\s+)*0?777\s+/(?=\s|$|;)"),
)
"""The built-in command deny list: ``(reason, regex searched in the command)``."""

INJECTION_PATTERNS: tuple[str, ...] = (
    r"(?i)\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}\b(?:previous|prior|above|earlier|all|your)\b[^.\n]{0,20}"
    r"\b(?:instructions?|prompts?|rules|directions)\b",
    r"(?i)\b(?:new|updated|real)\s+system\s+(?:prompt|instructions?|message)\b",
    r"(?i)\byou\s+are\s+now\b",
    r"(?i)\bsystem\s+(?:note|override)\s*:",
    r"<\|(?:im_start|im_end|system|user|assistant|endoftext|start_header_id)\|?>",
    r"\[/?INST\]|<</?SYS>>",
    r"(?im)^\s*(?:#+\s*)?(?:system|assistant)\s*:",
)
"""Text that addresses the model instead of describing a task (see the module docstring)."""


class CommandPolicy:
    """Decides what is never learned (see the module docstring).

    Args:
        cfg: ``[privacy]``: ``command_policy``, ``deny_commands``, ``refuse_injections``.
    """

    def __init__(self, cfg: PrivacyConfig | None = None) -> None:
        cfg = cfg or PrivacyConfig()
        rules = list(DANGEROUS_COMMANDS) if cfg.command_policy else []
        rules += [(f"matches [privacy] deny_commands {p!r}", p) for p in cfg.deny_commands]
        self._commands = [(reason, re.compile(p)) for reason, p in rules]
        self._injections = [re.compile(p) for p in INJECTION_PATTERNS] if cfg.refuse_injections else []

    def command_refusal(self, command: str) -> str | None:
        """Why ``command`` (an executed cell) must never be learned, or None when it may be."""
        folded = " ".join(command.split())
        return next((reason for reason, p in self._commands if p.search(folded)), None)

    def context_refusal(self, context: str) -> str | None:
        """Why ``context`` (the text before a cell, a question) must never be learned, or None."""
        match = next((m for p in self._injections if (m := p.search(context))), None)
        return None if match is None else f"reads as instructions to the model ({match.group(0).strip()[:40]!r})"
