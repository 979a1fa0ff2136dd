"""What is never learned, however often a person ran it: destructive commands, and text that reads as
instructions to the model.

**Commands**: the categories of :mod:`learnerd.privacy.commands`, decided on the command parsed by a real
shell parser (:mod:`learnerd.privacy.shell`) — recursive deletion or overwrite of home, root or devices,
filesystem creation or wiping, a download run by an interpreter, permission changes on ``/``, force pushes
to protected branches, destructive SQL, cluster-wide deletes — plus ``[privacy] deny_commands`` (regular
expressions searched in the command). Such an executed cell stays a block (the log is the log) but never
becomes an example, so it reaches no vector, no document, no adapter and no few-shot prompt.

**Prompt injection** (:mod:`learnerd.privacy.injection`): the intent *and* the command are judged, on
normalized text (Unicode confusables folded, zero-width characters removed, spaced letters joined).
"""

from __future__ import annotations

import re

from learnerd.privacy.commands import refusal as destructive
from learnerd.privacy.injection import InjectionRule
from learnerd.privacy.settings import PrivacyConfig
from learnerd.privacy.shell import parse


def category(reason: str) -> str:
    """A refusal's reason without its detail (``"destructive SQL (DROP TABLE users)"`` → ``"destructive SQL"``):
    what refusals are counted by, a bounded set whatever the input."""
    return reason.split(" (", 1)[0]


class CommandPolicy:
    """Decides what is never learned (see the module docstring); thread-safe.

    Args:
        cfg: ``[privacy]``: ``command_policy``, ``deny_commands``, ``refuse_injections``.
    """

    def __init__(self, cfg: PrivacyConfig | None = None) -> None:
        cfg = cfg or PrivacyConfig()
        self._builtin = cfg.command_policy
        self._deny = [re.compile(p) for p in cfg.deny_commands]
        self._injection = InjectionRule() if cfg.refuse_injections else None

    def command_refusal(self, command: str) -> str | None:
        """Why ``command`` (an executed cell) must never be learned as a command, or None when it may be."""
        if self._builtin:
            reason = destructive(parse(command))
            if reason:
                return reason
        folded = " ".join(command.split())
        return next((f"[privacy] deny_commands ({p.pattern})" for p in self._deny if p.search(folded)), None)

    def context_refusal(self, context: str) -> str | None:
        """Why ``context`` (an intent, a question, or a command's text) reads as instructions to the model, or None."""
        return self._injection.refusal(context) if self._injection is not None else None

    def refusal(self, intent: str, command: str) -> str | None:
        """Why the pair (``intent``, ``command``) must never be learned: the command policy on ``command``,
        the injection rule on both; None when it may be."""
        return self.command_refusal(command) or self.context_refusal(intent) or self.context_refusal(command)
