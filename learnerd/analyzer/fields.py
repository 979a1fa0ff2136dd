"""Strict field access for log lines, shared by every input format.

A line that is valid JSON but not what its format promises raises :class:`MalformedLine`; a
well-formed event of a kind this learnerd does not know raises :class:`UnknownEvent`. The analyzer
counts and logs the two separately (``malformed_lines`` vs ``unknown_events``): the first is a
writer's bug, the second usually a newer writer.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any


class MalformedLine(ValueError):
    """The line is not valid for its format; the message says which field and why."""


class UnknownEvent(ValueError):
    """The line is well formed but names an event type (or format version) this learnerd does not know."""


# RFC 3339 section 5.6 date-time: full-date "T" full-time, with a mandatory offset (Z or ±hh:mm).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_time(value: Any, field: str = "time") -> float:
    """An event time → seconds since the epoch (float).

    Accepts an RFC 3339 date-time string with an offset (``2024-05-01T12:00:00.25Z``,
    ``2024-05-01T14:00:00+02:00``; fractions beyond microseconds are truncated) or a finite,
    non-negative JSON number of epoch seconds (what zap, foyle's logger, writes).

    Raises:
        MalformedLine: anything else (a naive time, a boolean, NaN, a negative number, a date alone).
    """
    if value is None:
        raise MalformedLine(f"missing field {field!r}")
    if isinstance(value, bool):
        raise MalformedLine(f"{field} must be an RFC 3339 string or epoch seconds, not a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise MalformedLine(f"{field} must be finite, non-negative epoch seconds, not {value!r}")
        return float(value)
    if isinstance(value, str):
        if not _RFC3339.fullmatch(value):
            raise MalformedLine(f"{field} {value!r} is not an RFC 3339 date-time with an offset")
        text = value.upper().replace(" ", "T")
        date_time, _, rest = text.partition(".")
        if rest:  # keep at most microseconds: fromisoformat's precision
            digits = re.match(r"\d+", rest).group(0)  # type: ignore[union-attr]  # _RFC3339: digits follow the dot
            text = f"{date_time}.{digits[:6]}{rest[len(digits) :]}"
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError as exc:
            raise MalformedLine(f"{field} {value!r}: {exc}") from exc
    raise MalformedLine(f"{field} must be an RFC 3339 string or epoch seconds, not {_json_type_name(type(value))}")


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``obj[key]``, which must be present and an instance of ``kind`` (a bool is never an int here).

    Raises:
        MalformedLine: the key is missing or its value has another type.
    """
    name = f"{where}.{key}" if where else key
    if key not in obj:
        raise MalformedLine(f"missing field {name!r}")
    return check_type(obj[key], kind, name)


def optional(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str = "") -> Any:
    """``obj[key]`` when present and not null (it must then be a ``kind``), else ``default``."""
    value = obj.get(key)
    if value is None:
        return default
    return check_type(value, kind, f"{where}.{key}" if where else key)


def check_type(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(_json_type_name(k) for k in kinds)
        raise MalformedLine(f"field {name!r} must be {wanted}, not {_json_type_name(type(value))}")
    return value


def _json_type_name(kind: type) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }.get(kind, kind.__name__)
