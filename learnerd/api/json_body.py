"""The one JSON body parser of every HTTP endpoint (admin, search, RPC): safe against hostile bodies.

:func:`parse_json_body` accepts what RFC 8259 calls a JSON text, in UTF-8, with limits that the standard
library's :func:`json.loads` does not have, so that no body can raise anything but :class:`BadRequest`:

* **nesting**: at most :data:`MAX_DEPTH` levels of arrays and objects, checked before parsing, without
  recursion (``json.loads`` recurses once per level and raises ``RecursionError`` near 1,000);
* **numbers**: integers of at most :data:`MAX_INT_DIGITS` digits (Python refuses to convert more than
  4,300 with a ``ValueError``, and a long one costs quadratic time), finite floats only (``NaN``,
  ``Infinity`` and overflowing literals like ``1e999`` are refused);
* **text**: every string and key must be Unicode text: a lone UTF-16 surrogate escape (``"\\ud800"``),
  which ``json.loads`` turns into a ``str`` that cannot be encoded as UTF-8, is refused.

Bodies are bytes of at most the endpoint's size cap (64 KiB by default), so the O(n) checks are cheap.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from learnerd.api.errors import BadRequest

MAX_DEPTH = 32
"""Arrays and objects nested deeper than this are refused (no endpoint's body goes past 3)."""
MAX_INT_DIGITS = 20
"""Integers with more digits than this are refused (an int64 has 19)."""

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of ``raw`` (UTF-8), within the limits of the module docstring.

    Raises:
        BadRequest: not UTF-8, not JSON, nested deeper than :data:`MAX_DEPTH`, an integer longer than
            :data:`MAX_INT_DIGITS` digits, a non-finite number, or a lone surrogate in a string.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the body is not UTF-8: {exc}") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise BadRequest(f"the body nests arrays and objects {depth} levels deep; at most {MAX_DEPTH} are accepted")
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # from the hooks below (RecursionError: cannot, depth is checked)
        raise BadRequest(f"the body holds an unacceptable number: {exc}") from None
    _check_text(value)
    return value


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in the JSON text ``text``, brackets inside strings ignored.

    O(len(text)), no recursion; on malformed text the figure is an upper bound of what a parser would see.
    """
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(literal.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal[:40]!r} is not a finite float")
    return value


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _check_text(value: Any) -> None:
    """Raise :class:`BadRequest` if a string or key anywhere in ``value`` is not encodable as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _encodable(item)
        elif isinstance(item, dict):
            for key, member in item.items():
                _encodable(key)
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise BadRequest(f"a string holds a lone UTF-16 surrogate ({bad}), which is not Unicode text") from None
