"""The hostile-safe JSON body parser: what it refuses (with BadRequest, never another exception) and that
it returns exactly ``json.loads``'s value for every ordinary JSON document."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerd.api.errors import BadRequest
from learnerd.api.json_body import MAX_DEPTH, MAX_INT_DIGITS, nesting_depth, parse_json_body

ORDINARY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**MAX_INT_DIGITS - 1), 10**MAX_INT_DIGITS - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(ORDINARY, st.booleans())
def test_ordinary_json_parses_as_json_loads_does(value, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert parse_json_body(raw) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "levels deep"),
        (b"[" * 100_000, "levels deep"),  # unbalanced, far past the recursion limit
        (b"1" * (MAX_INT_DIGITS + 1), "digits"),
        (b"-" + b"1" * 5000, "digits"),
        (b"[NaN]", "NaN"),
        (b"-Infinity", "Infinity"),
        (b"1e999", "finite"),
        (b'"\\ud800"', "surrogate"),
        (b'{"\\udfff": 1}', "surrogate"),
        (b'[["ok", "\\ud83d"]]', "surrogate"),
        (b"\xff", "not UTF-8"),
        (b"{", "not valid JSON"),
    ],
)
def test_hostile_bodies_are_bad_requests(raw: bytes, needle: str) -> None:
    with pytest.raises(BadRequest, match=needle):
        parse_json_body(raw)


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    assert parse_json_body(b'"\\ud83d\\ude00"') == "\U0001f600"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"a": "[[[[" * 100, "b": ['\\"[', {"c": "]]}"}]})
    assert nesting_depth(text) == 3
    assert parse_json_body(text.encode())["a"] == "[[[[" * 100
    assert nesting_depth("[" * MAX_DEPTH + "]" * MAX_DEPTH) == MAX_DEPTH
