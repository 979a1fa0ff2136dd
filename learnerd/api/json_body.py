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

import itertools
import json
import math
import re
from typing import Any

from learnerd.api.errors import BadRequest

MAX_DEPTH = 32
"""Arrays and objects nested deeper than this are refused (no endpoint's body goes past 3)."""
MAX_INT_DIGITS = 20
"""Integers with more digits than this are refused (an int64 has 19)."""

_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_QUOTED = re.compile(r'"[^"]*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_LONG_DIGITS = re.compile(rf"\d{{{MAX_INT_DIGITS + 1},}}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of ``raw`` (UTF-8), within the limits of the module docstring.

    The limits are checked on the text (nesting and integer literals on its skeleton: the text without its
    strings, cut out with C-speed scans; surrogate escapes by a search) and by a hook per float only, so a
    megabyte of strings or integers costs about what ``json.loads`` costs.

    Raises:
        BadRequest: not UTF-8, not JSON, nested deeper than :data:`MAX_DEPTH`, an integer longer than
            :data:`MAX_INT_DIGITS` digits, a non-finite number, or a lone surrogate in a string.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the body is not UTF-8: {exc}") from None
    skeleton = _skeleton(text)
    depth = _depth(skeleton)
    if depth > MAX_DEPTH:
        raise BadRequest(f"the body nests arrays and objects {depth} levels deep; at most {MAX_DEPTH} are accepted")
    digits = _longest_integer(skeleton)
    if digits > MAX_INT_DIGITS:
        raise BadRequest(
            f"the body holds an unacceptable number: an integer of {digits} digits (at most {MAX_INT_DIGITS})"
        )
    try:
        value = json.loads(text, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # from the hooks below (RecursionError: cannot, depth is checked)
        raise BadRequest(f"the body holds an unacceptable number: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):  # a lone surrogate can only come from an escape (UTF-8 has none)
        _check_text(value)
    return value


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in the JSON text ``text``, brackets inside strings ignored.

    O(len(text)), no recursion; on malformed text the figure is an upper bound of what a parser would see.
    """
    return _depth(_skeleton(text))


def _skeleton(text: str) -> str:
    """``text`` without its strings: escaped backslashes, then escaped quotes, are dropped (so no quote is left
    inside a string), then every ``"…"`` goes. On malformed text, an approximation."""
    return _QUOTED.sub("", text.replace("\\\\", "").replace('\\"', ""))


def _depth(skeleton: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in ``skeleton`` (JSON text without its strings): the largest running
    sum of +1 per opening and -1 per closing bracket (``itertools.accumulate``: no Python loop per bracket)."""
    steps = map(_STEP.__getitem__, _NOT_BRACKETS.sub("", skeleton))
    return max(itertools.accumulate(steps), default=0)


def _longest_integer(skeleton: str) -> int:
    """The digits of the longest integer literal of more than :data:`MAX_INT_DIGITS` digits in ``skeleton``
    (0 when none): a run of digits that is neither a float's fraction or exponent nor followed by one."""
    longest = 0
    for run in _LONG_DIGITS.finditer(skeleton):
        before = skeleton[max(0, run.start() - 2) : run.start()]
        after = skeleton[run.end() : run.end() + 1]
        if before.endswith((".", "e", "E", "+", "e-", "E-")) or after in (".", "e", "E"):
            continue
        longest = max(longest, run.end() - run.start())
    return longest


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
