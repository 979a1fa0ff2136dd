"""The one screen every intake passes: secret redaction, then the command policy and the injection rule on
the intent and the command.

Every intake uses one :class:`Screen` (the daemon makes it from ``[privacy]``): the analyzer's readers
(every record redacted before it is parsed), ``POST /v1/blocks`` (every event before it is written), RPC
``inject_probe`` (:meth:`Screen.screen`: redacted, and refused with a reason before it is journaled),
served prompts and answers (redacted before they are recorded), and ``learnerd db scrub``. A block's
refusal is decided where it would become an example (:mod:`learnerd.reconcilers.examples`, with
:meth:`Screen.refusal`): the block itself stays, as the log is the log.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from learnerd.privacy.policy import CommandPolicy
from learnerd.privacy.redact import Redaction, Redactor
from learnerd.privacy.settings import PrivacyConfig


@dataclass(frozen=True)
class Screened:
    """An (intent, command) pair after the screen: both redacted; ``kinds`` the placeholders put in, by
    kind; ``refusal`` why it must never be learned, or None."""

    intent: str
    command: str
    kinds: Counter[str] = field(default_factory=Counter)
    refusal: str | None = None


class Screen:
    """Redaction, command policy and injection rule in one (see the module docstring); thread-safe.

    Args:
        cfg: ``[privacy]``.

    Raises:
        ValueError: a detect-secrets plugin name it does not have.
    """

    def __init__(self, cfg: PrivacyConfig | None = None) -> None:
        self.redactor = Redactor(cfg)
        self.policy = CommandPolicy(cfg)

    def redact(self, text: str) -> Redaction:
        """:meth:`Redactor.redact <learnerd.privacy.redact.Redactor.redact>`."""
        return self.redactor.redact(text)

    def redact_json(self, value: Any, kinds: Counter[str] | None = None) -> Any:
        """:meth:`Redactor.redact_json <learnerd.privacy.redact.Redactor.redact_json>`."""
        return self.redactor.redact_json(value, kinds)

    def refusal(self, intent: str, command: str) -> str | None:
        """:meth:`CommandPolicy.refusal <learnerd.privacy.policy.CommandPolicy.refusal>`."""
        return self.policy.refusal(intent, command)

    def screen(self, intent: str, command: str) -> Screened:
        """``intent`` and ``command`` redacted, and judged (on the text as given: a placeholder must not hide
        a destructive command's target)."""
        first, second = self.redactor.redact(intent), self.redactor.redact(command)
        return Screened(first.text, second.text, first.kinds + second.kinds, self.policy.refusal(intent, command))
