"""Secret redaction: every secret in a text becomes a typed placeholder (``<AWS_SECRET_ACCESS_KEY>``) before the
text is stored anywhere.

Two finders, merged:

* **detect-secrets** (Yelp, 1.5) plugins, run line by line as its scanner runs them (``analyze_line``): AWS,
  Azure, GitHub, GitLab, Slack, Stripe, OpenAI, … keys, JWTs, private keys, basic-auth URLs, ``password =
  "…"`` keywords and high-entropy quoted strings (Shannon entropy above ``[privacy] base64_limit`` /
  ``hex_limit`` bits per character). detect-secrets' own heuristic filters for templated values
  (``${VAR}``, ``<VAR>``, ``{{ var }}``) and sequential strings apply.
* **learnerd's patterns** for what shell history holds and detect-secrets reads only in quoted source code
  (:data:`BUILTIN_PATTERNS`): ``NAME=value`` where the name says secret, password, token, key or credential
  (the placeholder is the name: ``<AWS_SECRET_ACCESS_KEY>``); ``Authorization: Bearer …``; ``mysql -p…``;
  ``--password=…``; ``curl -u user:password``; ``scheme://user:password@host``; a PEM private key block;
  plus ``[privacy] extra_patterns``.

A plugin may report only part of a secret (a token's prefix); the replaced span is widened to the whole
token around it (letters, digits and ``_-+/.~``, and trailing ``=`` padding). A value that fully matches an
``[privacy] allow`` pattern, and learnerd's own placeholders, are never replaced, so redaction is
idempotent: ``redact(redact(t).text).text == redact(t).text``.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from learnerd.privacy.settings import PrivacyConfig

PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")
"""What a replaced secret looks like (and what is never replaced again)."""

_SECRET_NAME = r"[A-Za-z0-9_]*(?:SECRET|PASSWORD|PASSWD|PASSPHRASE|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)"
BUILTIN_PATTERNS: tuple[tuple[str | None, str], ...] = (
    # (placeholder kind, or None: the "name" group names it; the regex, whose "secret" group is replaced)
    (None, rf"(?i)\b(?P<name>{_SECRET_NAME}[A-Za-z0-9_]*)\s*[=:]\s*[\"']?(?P<secret>[^\s\"'`;|&]+)"),
    ("BEARER_TOKEN", r"(?i)\bauthorization:\s*(?:bearer|token|basic)\s+(?P<secret>[^\s\"']+)"),
    ("MYSQL_PASSWORD", r"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n|;]*?\s-p(?P<secret>[^\s\"']+)"),
    ("PASSWORD", r"(?i)--(?:password|passwd|pass|token|api-key|secret)[= ](?P<secret>[^\s\"'-][^\s\"']*)"),
    ("BASIC_AUTH_PASSWORD", r"(?:^|\s)(?:-u|--user)[ =][\"']?[^\s:\"']+:(?P<secret>[^\s\"']+)"),
    ("BASIC_AUTH_CREDENTIALS", r"://[^/\s:@]+:(?P<secret>[^@\s/]+)@"),
    ("PRIVATE_KEY", r"(?s)(?P<secret>-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----)"),
)

CACHED_TEXTS = 4096
"""How many short texts :meth:`Redactor.redact` remembers the redaction of (least recently used dropped)."""
CACHED_CHARS = 200
"""The longest text remembered: ids, paths, names and short commands; at most ~1 MB in all."""

_TOKEN_LEFT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~")
_TOKEN_RIGHT = _TOKEN_LEFT | {"="}


@dataclass(frozen=True)
class Redaction:
    """``text`` with every secret replaced; ``kinds``: how many of each placeholder were put in."""

    text: str
    kinds: Counter[str] = field(default_factory=Counter)


def placeholder_kind(secret_type: str) -> str:
    """``"AWS Access Key"`` → ``"AWS_ACCESS_KEY"``: a detect-secrets type (or a variable name) as a placeholder kind."""
    return re.sub(r"[^A-Z0-9]+", "_", secret_type.upper()).strip("_") or "SECRET"


class Redactor:
    """Finds and replaces secrets (see the module docstring); thread-safe after construction.

    Args:
        cfg: ``[privacy]``: the plugins, entropy limits, extra patterns and allow-list.

    Raises:
        ValueError: a plugin name detect-secrets does not have (``PrivacyConfig`` checks this first).
    """

    def __init__(self, cfg: PrivacyConfig | None = None) -> None:
        cfg = cfg or PrivacyConfig()
        self._plugins = _detect_secrets_plugins(cfg)
        self._patterns = [(kind, re.compile(p)) for kind, p in BUILTIN_PATTERNS]
        self._patterns += [("SECRET", re.compile(p)) for p in cfg.extra_patterns]
        self._allow = [re.compile(p) for p in cfg.allow]
        self._cached = functools.lru_cache(maxsize=CACHED_TEXTS)(self._redact)

    def redact(self, text: str) -> Redaction:
        """``text`` with its secrets replaced by placeholders, and the count of each kind.

        A text of at most :data:`CACHED_CHARS` characters is looked up in a cache of the last
        :data:`CACHED_TEXTS` such texts first: the ids, paths and names every line of an assistant's transcript
        repeats (its session id, working directory, record type) are scanned once, not once per line."""
        if len(text) <= CACHED_CHARS:
            found = self._cached(text)
            return Redaction(found.text, Counter(found.kinds)) if found.kinds else found
        return self._redact(text)

    def _redact(self, text: str) -> Redaction:
        if not text:
            return Redaction(text)
        spans: list[tuple[int, int, str]] = []
        for kind, pattern in self._patterns:
            for match in pattern.finditer(text):
                group = "secret" if "secret" in pattern.groupindex else 0
                start, end = match.span(group)
                name = kind or placeholder_kind(match.group("name"))
                spans.append((start, end, name))
        offset = 0
        for line in text.split("\n"):
            for plugin in self._plugins:
                for found in plugin.analyze_line(filename="cell.sh", line=line, line_number=1):
                    spans += _occurrences(text, line, offset, found.secret_value, placeholder_kind(found.type))
            offset += len(line) + 1
        return self._replace(text, spans)

    def redact_json(self, value: Any, kinds: Counter[str] | None = None) -> Any:
        """``value`` (parsed JSON: dicts, lists, strings, numbers) with every string redacted (object keys
        are names, not data: kept); each placeholder put in is counted into ``kinds``. Iterative: any
        depth the JSON parser accepted is walked. A string that holds JSON itself (a Codex call's
        ``arguments``, an OpenTelemetry ``gen_ai.*.messages`` attribute) and has a secret is redacted
        decoded and encoded again, so it stays JSON its reader can parse."""
        kinds = kinds if kinds is not None else Counter()
        root: list[Any] = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            container, key = stack.pop()
            item = container[key]
            if isinstance(item, str):
                container[key] = self._redact_string(item, kinds)
            elif isinstance(item, dict):
                copy = container[key] = dict(item)
                stack.extend((copy, k) for k in copy)
            elif isinstance(item, list):
                copy = container[key] = list(item)
                stack.extend((copy, i) for i in range(len(copy)))
        return root[0]

    def _redact_string(self, text: str, kinds: Counter[str]) -> str:
        redaction = self.redact(text)
        if not redaction.kinds:
            return text
        if text.lstrip()[:1] in ("{", "["):
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = None
            inner: Counter[str] = Counter()
            redacted = self.redact_json(decoded, inner) if isinstance(decoded, dict | list) else None
            if inner:  # else the secret is only seen in the encoded text (a key and its value): redact that
                kinds.update(inner)
                return json.dumps(redacted, ensure_ascii=False)
        kinds.update(redaction.kinds)
        return redaction.text

    def _replace(self, text: str, spans: list[tuple[int, int, str]]) -> Redaction:
        kinds: Counter[str] = Counter()
        out: list[str] = []
        at = 0
        for start, end, kind in _merged(spans):
            value = text[start:end]
            if start < at or not value.strip() or self._allowed(value):
                continue
            out += [text[at:start], f"<{kind}>"]
            kinds[kind] += 1
            at = end
        out.append(text[at:])
        return Redaction("".join(out), kinds)

    def _allowed(self, value: str) -> bool:
        if PLACEHOLDER.fullmatch(value) or _templated(value):
            return True
        return any(p.fullmatch(value) for p in self._allow)


def _occurrences(text: str, line: str, offset: int, value: str | None, kind: str) -> list[tuple[int, int, str]]:
    """Spans in ``text`` of each occurrence of ``value`` in ``line`` (which starts at ``offset``), each
    widened to the whole token around it."""
    spans = []
    if not value:
        return spans
    start = line.find(value)
    while start >= 0:
        left, right = offset + start, offset + start + len(value)
        while left > offset and text[left - 1] in _TOKEN_LEFT:
            left -= 1
        while right < offset + len(line) and text[right] in _TOKEN_RIGHT:
            right += 1
        spans.append((left, right, kind))
        start = line.find(value, start + len(value))
    return spans


def _merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping spans joined (the kind of the first, longest one kept), in text order."""
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -s[1])):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kind))
    return merged


def _templated(value: str) -> bool:
    """A reference to a secret rather than one: ``$VAR``, ``${VAR}``, ``$(cmd)``, ``{{ var }}``, ``%VAR%``."""
    return bool(re.fullmatch(r"\$\{?\w+\}?|\$\(.*\)|\{\{.*\}\}|%\w+%|\*+", value))


def _detect_secrets_plugins(cfg: PrivacyConfig) -> list[Any]:
    """detect-secrets plugin instances of ``cfg.plugins`` (entropy plugins with ``cfg``'s limits), made
    directly rather than through detect-secrets' process-wide settings."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
    limits = {"Base64HighEntropyString": cfg.base64_limit, "HexHighEntropyString": cfg.hex_limit}
    plugins = []
    for name in cfg.plugins:
        if name not in classes:
            raise ValueError(f"detect-secrets has no plugin {name!r}")
        plugins.append(classes[name](limit=limits[name]) if name in limits else classes[name]())
    return plugins
