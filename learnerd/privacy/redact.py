"""Secret redaction: every secret in a text becomes a typed placeholder (``<AWS_SECRET_ACCESS_KEY>``) before the
text is stored anywhere.

The finders, merged (each gives the spans of secrets' own characters; overlapping spans are joined):

* **the parsed command line** (:mod:`learnerd.privacy.argv` on :mod:`learnerd.privacy.shell`): password
  options of common CLIs, any option named as a secret, variable assignments named as secrets (the
  placeholder is the name: ``DB_PASS=<DB_PASS>``), ``config set NAME VALUE``, passwords piped to a command
  that reads one on standard input. A secret split over lines by a line continuation is one word there;
* **the forms of secrets in any text** (:mod:`learnerd.privacy.formats`): providers' token formats,
  ``NAME=value``, HTTP headers (``Authorization:``, ``X-Api-Key:``, ``Cookie:``…), URL userinfo (a password
  holding ``@`` or ``/`` included), PEM private keys, a password stated in prose ("the password is …"),
  plus ``[privacy] extra_patterns``;
* **detect-secrets** (Yelp, 1.5) plugins, run line by line: its regex plugins' own matches, and the values
  its other plugins (keywords, entropy of quoted strings) report where they stand as whole tokens;
* **entropy and encoding of shell words**: an unquoted word (or an option's ``=`` value) of at least 20
  base64 characters with upper and lower case and digits whose Shannon entropy is above ``[privacy]
  base64_limit``, and a base64 word that decodes to text holding a secret (``<BASE64_SECRET>``).

A secret split over the cells of one record (a notebook's context cells) is found in the cells joined by
line breaks (:meth:`Redactor.redact_json`). Only a secret's own characters are replaced, never a token
around it. A value that fully matches an ``[privacy] allow`` pattern, a reference (``$VAR``, ``${VAR}``,
``$(cmd)``, ``{{ var }}``), and learnerd's own placeholders are never replaced, so redaction is idempotent:
``redact(redact(t).text).text == redact(t).text``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from learnerd.privacy import argv, formats, shell
from learnerd.privacy.settings import PrivacyConfig

PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")
"""What a replaced secret looks like (and what is never replaced again)."""

CACHED_TEXTS = 4096
"""How many short texts :meth:`Redactor.redact` remembers the redaction of (least recently used dropped)."""
CACHED_CHARS = 200
"""The longest text remembered: ids, paths, names and short commands; at most ~1 MB in all."""
MIN_LOCATED_CHARS = 8
"""A value a detect-secrets plugin reports without its place is replaced where it stands as a whole token; one
at least this long also where it is part of a longer token (a reported prefix: the whole token goes)."""
ENTROPY_MIN_CHARS = 20
"""The shortest unquoted word the entropy rule judges."""

_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~=")
_BASE64_WORD = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_ENTROPY_WORD = re.compile(rf"[A-Za-z0-9+/=_\-]{{{ENTROPY_MIN_CHARS},}}")

Span = tuple[int, int, str]


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
        plugins = _detect_secrets_plugins(cfg)
        self._regex_plugins = [(placeholder_kind(p.secret_type), list(p.denylist)) for p in plugins if _is_regex(p)]
        self._other_plugins = [p for p in plugins if not _is_regex(p)]
        self._entropy_limit = cfg.base64_limit
        self._patterns = [(kind, re.compile(p)) for kind, p in formats.TEXT_PATTERNS]
        self._patterns += [(kind, re.compile(p)) for kind, p in formats.TOKEN_FORMATS]
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

    def _redact(self, text: str, extra: tuple[Span, ...] = ()) -> Redaction:
        if not text:
            return Redaction(text)
        return self._replace(text, [*extra, *self.spans(text)])

    def spans(self, text: str, decode: bool = True) -> list[Span]:
        """``(start, end, kind)`` of every secret every finder sees in ``text`` (overlapping, unsorted);
        ``decode``: also look into base64 words."""
        script = shell.parse(text)
        found = argv.secret_spans(script)
        for kind, pattern in self._patterns:
            for match in pattern.finditer(text):
                group = "secret" if "secret" in pattern.groupindex else 0
                if match.group(group).startswith("$"):  # a reference: $VAR, ${VAR}, $(cmd)
                    continue
                if kind is None and not formats.secret_name(match.group("name")):
                    continue
                found.append((*match.span(group), kind or placeholder_kind(match.group("name"))))
        found += [(start, end, "BASIC_AUTH_CREDENTIALS") for start, end in formats.url_passwords(text)]
        found += self._plugin_spans(text)
        found += self._word_spans(script, decode)
        return found

    def _plugin_spans(self, text: str) -> list[Span]:
        spans: list[Span] = []
        offset = 0
        for line in text.split("\n"):
            for kind, regexes in self._regex_plugins:
                for regex in regexes:
                    for match in regex.finditer(line):
                        groups = [g for g in range(1, (regex.groups or 0) + 1) if match.group(g)]
                        spans += [(offset + match.start(g), offset + match.end(g), kind) for g in groups]
                        if not groups:  # a whole-token pattern may stop short of its token's end (a JWT's signature)
                            end = match.end()
                            while end < len(line) and line[end] in _TOKEN:
                                end += 1
                            spans.append((offset + match.start(), offset + end, kind))
            for plugin in self._other_plugins:
                for found in plugin.analyze_line(filename="cell.sh", line=line, line_number=1):
                    spans += _occurrences(text, line, offset, found.secret_value, placeholder_kind(found.type))
            offset += len(line) + 1
        return spans

    def _word_spans(self, script: shell.Script, decode: bool) -> list[Span]:
        """The entropy and base64 rules on the words of ``script`` (see the module docstring)."""
        from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

        entropy = Base64HighEntropyString(limit=self._entropy_limit).calculate_shannon_entropy
        spans: list[Span] = []
        for word in shell.words_of(script):
            if not word.literal or len(word.value) < 16:
                continue
            value = word.value
            head = max(value.rfind("="), value.rfind(":") if "://" not in value else -1) + 1
            for start in {0, head}:
                candidate = value[start:]
                if _ENTROPY_WORD.fullmatch(candidate) and _high_entropy(candidate, entropy, self._entropy_limit):
                    spans.append((*word.span(start), "HIGH_ENTROPY_STRING"))
                elif decode and _BASE64_WORD.fullmatch(candidate) and self._decodes_to_secret(candidate):
                    spans.append((*word.span(start), "BASE64_SECRET"))
        return spans

    def _decodes_to_secret(self, word: str) -> bool:
        padded = word + "=" * (-len(word) % 4)
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                data = decode(padded.encode())
            except (binascii.Error, ValueError):
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if (len(text) >= 8 and text.isprintable()) or ("\n" in text and text.replace("\n", "").isprintable()):
                return any(not self._allowed(text[s:e]) for s, e, _ in self.spans(text, decode=False))
        return False

    def redact_json(self, value: Any, kinds: Counter[str] | None = None) -> Any:
        """``value`` (parsed JSON: dicts, lists, strings, numbers) with every string redacted (object keys
        are names, not data: kept); each placeholder put in is counted into ``kinds``. Iterative: any
        depth the JSON parser accepted is walked. A string that holds JSON itself (a Codex call's
        ``arguments``, an OpenTelemetry ``gen_ai.*.messages`` attribute) and has a secret is redacted
        decoded and encoded again, so it stays JSON its reader can parse. The strings of one list (or the
        ``text`` of its cell objects) are also searched joined by line breaks: a secret split over two cells
        is replaced in both."""
        kinds = kinds if kinds is not None else Counter()
        root: list[Any] = [value]
        stack: list[tuple[Any, Any, tuple[Span, ...]]] = [(root, 0, ())]
        while stack:
            container, key, extra = stack.pop()
            item = container[key]
            if isinstance(item, str):
                container[key] = self._redact_string(item, kinds, extra)
            elif isinstance(item, dict):
                copy = container[key] = dict(item)
                stack.extend((copy, k, extra if k == "text" else ()) for k in copy)
            elif isinstance(item, list):
                copied = container[key] = list(item)
                split = self._split_secrets(copied)
                stack.extend((copied, i, split.get(i, ())) for i in range(len(copied)))
        return root[0]

    def _split_secrets(self, items: list[Any]) -> dict[int, tuple[Span, ...]]:
        """Spans, per item, of the secrets seen in the text items of ``items`` (strings, or the ``text`` of cell
        objects) joined: by line breaks (a value in the cell after its option or assignment; any span found), and
        end to end (a token cut in two; only spans that cross from one item into the next)."""
        candidates = {
            i: t if isinstance(t, str) else t.get("text") for i, t in enumerate(items) if isinstance(t, str | dict)
        }
        texts = {i: t for i, t in candidates.items() if isinstance(t, str)}
        out: dict[int, list[Span]] = {}
        if len(texts) < 2:
            return {}
        for separator in ("\n", ""):
            starts, at = {}, 0
            for i, text in texts.items():
                starts[i] = at
                at += len(text) + len(separator)
            for start, end, kind in _merged(self.spans(separator.join(texts.values()))):
                inside = [i for i, s in starts.items() if s < end and start < s + len(texts[i])]
                if separator == "" and len(inside) < 2:
                    continue
                for i in inside:
                    local = (max(start, starts[i]) - starts[i], min(end, starts[i] + len(texts[i])) - starts[i])
                    if local[1] > local[0] and texts[i][local[0] : local[1]].strip():
                        out.setdefault(i, []).append((*local, kind))
        return {i: tuple(spans) for i, spans in out.items()}

    def _redact_string(self, text: str, kinds: Counter[str], extra: tuple[Span, ...] = ()) -> str:
        if text.lstrip()[:1] in ("{", "["):  # JSON in a string: its strings are what a reader parses (a shell command)
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = None
            inner: Counter[str] = Counter()
            redacted = self.redact_json(decoded, inner) if isinstance(decoded, dict | list) else None
            if inner:
                kinds.update(inner)
                return json.dumps(redacted, ensure_ascii=False)
        # else the secret, if any, is only seen in the text as it is (in JSON: a key and its value)
        redaction = self._redact(text, extra) if extra else self.redact(text)
        kinds.update(redaction.kinds)
        return redaction.text if redaction.kinds else text

    def _replace(self, text: str, spans: list[Span]) -> Redaction:
        kinds: Counter[str] = Counter()
        out: list[str] = []
        at = 0
        placed = [m.span() for m in PLACEHOLDER.finditer(text)] if "<" in text else []
        spans = [s for s in spans if not self._allowed(text[s[0] : s[1]]) and not _within(s, placed)]
        for start, end, kind in _merged(spans):
            value = text[start:end]
            if start < at or not value.strip():
                continue
            out += [text[at:start], f"<{kind}>"]
            kinds[kind] += 1
            at = end
        out.append(text[at:])
        return Redaction("".join(out), kinds)

    def _allowed(self, value: str) -> bool:
        value = value.strip()
        if not value or PLACEHOLDER.fullmatch(value) or formats.templated(value) or formats.is_path(value):
            return True
        return any(p.fullmatch(value) for p in self._allow)


def _within(span: Span, placed: list[tuple[int, int]]) -> bool:
    """Whether ``span`` overlaps one of the placeholders already in the text (``placed``)."""
    return any(span[0] < end and start < span[1] for start, end in placed)


def _high_entropy(candidate: str, entropy: Any, limit: float) -> bool:
    """A random-looking base64 word: mixed case and digits, not a path, entropy above ``limit``."""
    if candidate.startswith(("/", "-")) or candidate.count("/") > 2 or candidate.count("-") > 3:
        return False
    classes = (
        any(c.isupper() for c in candidate),
        any(c.islower() for c in candidate),
        any(c.isdigit() for c in candidate),
    )
    return all(classes) and entropy(candidate) > limit


def _is_regex(plugin: Any) -> bool:
    from detect_secrets.plugins.base import RegexBasedDetector

    return isinstance(plugin, RegexBasedDetector)


def _occurrences(text: str, line: str, offset: int, value: str | None, kind: str) -> list[Span]:
    """Spans in ``text`` of each occurrence of ``value`` in ``line`` (which starts at ``offset``) that stands as
    a whole token, or, for a value of at least :data:`MIN_LOCATED_CHARS`, that starts a longer token (then the
    whole token)."""
    spans: list[Span] = []
    if not value:
        return spans
    start = line.find(value)
    while start >= 0:
        left, right = offset + start, offset + start + len(value)
        whole = (left == offset or text[left - 1] not in _TOKEN) and (
            right == offset + len(line) or text[right] not in _TOKEN
        )
        if whole or len(value) >= MIN_LOCATED_CHARS:
            while right < offset + len(line) and text[right] in _TOKEN:
                right += 1
            spans.append((left, right, kind))
        start = line.find(value, start + len(value))
    return spans


def _merged(spans: list[Span]) -> list[Span]:
    """Overlapping spans joined (the kind of the first, longest one kept), in text order."""
    merged: list[Span] = []
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -s[1])):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kind))
    return merged


def _detect_secrets_plugins(cfg: PrivacyConfig) -> list[Any]:
    """detect-secrets plugin instances of ``cfg.plugins`` (entropy plugins with ``cfg``'s limits), made
    directly rather than through detect-secrets' process-wide settings."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    by_secret_type: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    classes = {plugin.__name__: plugin for plugin in by_secret_type.values()}
    limits = {"Base64HighEntropyString": cfg.base64_limit, "HexHighEntropyString": cfg.hex_limit}
    plugins = []
    for name in cfg.plugins:
        if name not in classes:
            raise ValueError(f"detect-secrets has no plugin {name!r}")
        plugins.append(classes[name](limit=limits[name]) if name in limits else classes[name]())
    return plugins
