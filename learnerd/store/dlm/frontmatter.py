"""The YAML frontmatter of a .dlm document: the fields learnerd reads, validated as dlm validates them.

Source of the format: dlm's ``src/dlm/doc/schema.py`` (``DlmFrontmatter``) at schema version 15; the
``training`` block is :class:`learnerd.store.dlm.training.TrainingConfig`. dlm forbids unknown keys;
learnerd keeps them (``Frontmatter.raw``, ``TrainingConfig.extra``) so a document written by a newer dlm
still loads, and never rewrites the frontmatter text of an existing document (byte-identical round trip).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from learnerd.store.dlm.errors import DocumentError
from learnerd.store.dlm.training import TrainingConfig, TrainingConfigError

#: dlm's ``CURRENT_SCHEMA_VERSION``: the newest ``dlm_version`` dlm (and so learnerd) understands.
CURRENT_DLM_VERSION = 15

_ULID_RE = re.compile(r"^[0-9A-HJ-KM-NP-TV-Z]{26}$")  # Crockford base32 without I, L, O, U
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now_s: float | None = None) -> str:
    """A fresh 26-character ULID: 48-bit Unix time in milliseconds, then 80 random bits, Crockford base32."""
    ms = int((time.time() if now_s is None else now_s) * 1000)
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in range(25, -1, -1))


@dataclass(frozen=True)
class Frontmatter:
    """The validated frontmatter. ``raw`` is the whole YAML mapping as parsed, unknown keys included."""

    dlm_id: str
    base_model: str
    dlm_version: int = CURRENT_DLM_VERSION
    training: TrainingConfig = field(default_factory=TrainingConfig)
    system_prompt: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


def parse_frontmatter(yaml_text: str, *, path: str | Path | None = None, first_line: int = 2) -> Frontmatter:
    """Parse and validate the YAML between the two ``---`` lines.

    Args:
        yaml_text: the frontmatter text, LF line ends, delimiters excluded.
        path: the file, for error messages.
        first_line: the file line number of the first line of ``yaml_text``.

    Raises:
        DocumentError: not YAML, not a mapping, or a field learnerd reads is missing or out of range;
            ``line`` points at the offending key where it can be found.
    """
    try:
        raw = yaml.safe_load(yaml_text) if yaml_text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = first_line + mark.line if mark is not None else first_line
        raise DocumentError(f"frontmatter is not valid YAML: {exc}", path=path, line=line) from None
    except (ValueError, TypeError, RecursionError) as exc:  # PyYAML constructors: e.g. a 13th month in a date
        raise DocumentError(f"frontmatter is not valid YAML: {exc}", path=path, line=first_line) from None
    if not isinstance(raw, dict):
        raise DocumentError(f"frontmatter must be a mapping, not {type(raw).__name__}", path=path, line=first_line)

    def fail(message: str, *keys: str) -> DocumentError:
        return DocumentError(message, path=path, line=first_line + _key_line(yaml_text, keys))

    dlm_id = raw.get("dlm_id")
    if not isinstance(dlm_id, str) or not _ULID_RE.fullmatch(dlm_id):
        raise fail(f"dlm_id must be a 26-character Crockford base32 ULID, not {dlm_id!r}", "dlm_id")
    version = raw.get("dlm_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= CURRENT_DLM_VERSION:
        raise fail(f"dlm_version must be an integer in 1..{CURRENT_DLM_VERSION}, not {version!r}", "dlm_version")
    base_model = raw.get("base_model")
    if not isinstance(base_model, str) or not base_model:
        raise fail(f"base_model must be a non-empty string, not {base_model!r}", "base_model")
    system_prompt = raw.get("system_prompt")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise fail("system_prompt must be a string", "system_prompt")
    training_raw = raw.get("training", {})
    if not isinstance(training_raw, dict):
        raise fail("training must be a mapping", "training")
    try:
        training = TrainingConfig.from_mapping(training_raw)
    except TrainingConfigError as exc:
        raise fail(str(exc), "training", *([exc.key] if exc.key else [])) from None
    return Frontmatter(
        dlm_id=dlm_id,
        dlm_version=version,
        base_model=base_model,
        training=training,
        system_prompt=system_prompt,
        raw=raw,
    )


def _key_line(yaml_text: str, keys: tuple[str, ...]) -> int:
    """0-based line of the deepest of ``keys`` (a path of mapping keys) found in ``yaml_text``, else 0."""
    try:
        node = yaml.compose(yaml_text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 0
    line = 0
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == key:
                line, node = key_node.start_mark.line, value_node
                break
        else:
            break
    return line


def render_frontmatter(
    *,
    dlm_id: str,
    base_model: str,
    dlm_version: int = CURRENT_DLM_VERSION,
    training: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> str:
    """The YAML text (no ``---`` delimiters, ending in LF) of a new document's frontmatter."""
    data: dict[str, Any] = {"dlm_id": dlm_id, "dlm_version": dlm_version, "base_model": base_model}
    if training:
        data["training"] = dict(training)
    if system_prompt is not None:
        data["system_prompt"] = system_prompt
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
