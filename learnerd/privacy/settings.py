"""``[privacy]``: the secret redactor and the command policy (:mod:`learnerd.privacy`)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from learnerd.sections import Section

DEFAULT_PLUGINS = (
    "AWSKeyDetector",
    "ArtifactoryDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "CloudantDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "MailchimpDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SoftlayerDetector",
    "SquareOAuthDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
    "Base64HighEntropyString",
    "HexHighEntropyString",
)
"""detect-secrets 1.5's plugins, all but ``IPPublicDetector`` (a public IP in a command is rarely a secret)."""


def _regexes(value: list[str], key: str) -> list[str]:
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"privacy.{key}: {pattern!r} is not a regular expression: {exc}") from None
    return value


class PrivacyConfig(Section):
    """Secrets redacted before storage; commands and contexts never learned (docs/privacy.md)."""

    plugins: list[str] = Field(default_factory=lambda: list(DEFAULT_PLUGINS))
    """detect-secrets plugins that find secrets (class names; [] = none, learnerd's own patterns still run)"""
    base64_limit: float = Field(4.5, ge=0, le=8)
    """Shannon entropy (bits per character) above which a quoted base64 string is a secret (detect-secrets')"""
    hex_limit: float = Field(3.0, ge=0, le=8)
    """the same for a quoted hex string"""
    extra_patterns: list[str] = Field(default_factory=list)
    """more regular expressions of secrets: group "secret" (else the whole match) becomes <SECRET>"""
    allow: list[str] = Field(default_factory=list)
    """regular expressions of values never redacted (a test key, a public id)"""
    command_policy: bool = True
    """refuse to learn the built-in dangerous commands (rm -rf ~, mkfs, curl … | sh, …)"""
    deny_commands: list[str] = Field(default_factory=list)
    """more regular expressions of commands never learned (searched in the executed cell)"""
    refuse_injections: bool = True
    """refuse to learn a context that reads as instructions to the model (ignore previous instructions, …)"""

    @field_validator("extra_patterns")
    @classmethod
    def _extra(cls, value: list[str]) -> list[str]:
        return _regexes(value, "extra_patterns")

    @field_validator("allow")
    @classmethod
    def _allow(cls, value: list[str]) -> list[str]:
        return _regexes(value, "allow")

    @field_validator("deny_commands")
    @classmethod
    def _deny(cls, value: list[str]) -> list[str]:
        return _regexes(value, "deny_commands")

    @field_validator("plugins")
    @classmethod
    def _known_plugins(cls, value: list[str]) -> list[str]:
        known = {*DEFAULT_PLUGINS, "IPPublicDetector"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"privacy.plugins: unknown detect-secrets plugin(s) {', '.join(unknown)}")
        return value
