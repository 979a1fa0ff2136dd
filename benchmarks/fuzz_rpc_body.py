"""Fuzz the RPC body parser (``learnerd.api.rpc._parse``, over ``learnerd.api.json_body``) with hypothesis,
at a fixed budget of inputs, and check its one promise: for any bytes it either returns an
``inject_probe`` request whose strings are non-empty Unicode text (so the journal can always encode them)
or refuses with a :class:`~learnerd.api.errors.ControlError` (400 / 404) — never any other exception
(which the server would answer with 500).

Three input families, ``--examples`` each (seeded, so a run is reproducible):

1. **bytes**: arbitrary byte strings up to 4 KiB;
2. **json**: JSON texts of hostile values — strings with lone surrogates (written as ``\\udXXX`` escapes),
   integers of up to 6,000 digits, NaN / Infinity, arrays nested up to 40,000 levels;
3. **envelope**: well-formed ``inject_probe`` envelopes whose ``prompt`` / ``reference`` / ``tags`` are
   such values.

Prints the inputs tried per family and in all, how many were accepted and refused, and the parser's
cost beside ``json.loads`` on the same inputs measured in the same run (a ratio; ``json.loads`` alone is
the baseline, which is what the parser replaced). Exits 1 with the failing input if the promise breaks.
Usage::

    python benchmarks/fuzz_rpc_body.py [--examples 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from learnerd.api.errors import ControlError
from learnerd.api.rpc import _parse

ANY_CHAR = st.characters(blacklist_categories=())  # surrogates included
HOSTILE_TEXT = st.text(ANY_CHAR, max_size=40)
HUGE_INT = st.integers(1, 6000).map(lambda n: f"__RAW_{n}__")  # spliced in as n raw digits by dumps()
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HUGE_INT,
    st.floats(allow_nan=True, allow_infinity=True),
    HOSTILE_TEXT,
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4), max_leaves=12
)
_RAW = re.compile(r'"__RAW_(\d+)__"')
NESTING = st.integers(0, 40_000).map(lambda n: "[" * n + "]" * n)


INPUT = "Input: none beyond the test extra (hypothesis)."


def dumps(value: object) -> str:
    """JSON text of ``value``: lone surrogates as escapes (``ensure_ascii``), NaN as ``NaN``, and integers
    past Python's 4,300-digit conversion limit spliced in as raw digits."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    return _RAW.sub(lambda m: "9" * int(m.group(1)), text)


def envelope(prompt: object, reference: object, tags: object) -> bytes:
    return dumps(
        {"method": "inject_probe", "params": {"prompt": prompt, "reference": reference, "tags": tags}}
    ).encode()


FAMILIES = {
    "bytes": st.binary(max_size=4096),
    "json": st.one_of(VALUES.map(lambda v: dumps(v).encode()), NESTING.map(str.encode)),
    "envelope": st.builds(envelope, VALUES, VALUES, st.one_of(VALUES, st.lists(HOSTILE_TEXT, max_size=3))),
}


class Tally:
    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.parse_s = 0.0
        self.loads_s = 0.0
        self.failure: tuple[bytes, BaseException] | None = None

    def check(self, body: bytes) -> None:
        started = time.perf_counter()
        try:
            prompt, reference, tags = _parse(body)
        except ControlError:
            self.outcomes["refused"] += 1
        except Exception as exc:  # the promise broke: this would have been a 500
            self.failure = (body, exc)
            raise
        else:
            for text in (prompt, reference, *tags):
                text.encode("utf-8")  # the journal's encoding must not fail
            assert prompt and reference
            self.outcomes["accepted"] += 1
        self.parse_s += time.perf_counter() - started
        started = time.perf_counter()
        with contextlib.suppress(ValueError, RecursionError):
            json.loads(body)
        self.loads_s += time.perf_counter() - started


def fuzz(name: str, examples: int, tally: Tally) -> None:
    @seed(14)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(FAMILIES[name])
    def run(body: bytes) -> None:
        tally.check(body)

    run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INPUT)
    parser.add_argument("--examples", type=int, default=20_000, help="inputs per family (the fixed budget)")
    args = parser.parse_args()
    total = Counter()
    parse_s = loads_s = 0.0
    started = time.perf_counter()
    for name in FAMILIES:
        tally = Tally()
        try:
            fuzz(name, args.examples, tally)
        except Exception:
            body, exc = tally.failure or (b"", None)
            print(f"FAILED on {name} input {body[:200]!r}: {type(exc).__name__}: {exc}")
            return 1
        tried = sum(tally.outcomes.values())
        accepted, refused = tally.outcomes["accepted"], tally.outcomes["refused"]
        print(f"{name:9s} tried {tried:7d}   accepted {accepted:6d}   refused {refused:7d}")
        total += tally.outcomes
        parse_s += tally.parse_s
        loads_s += tally.loads_s
    tried = sum(total.values())
    print(f"all       tried {tried:7d} inputs in {time.perf_counter() - started:.1f} s; 0 escaped as another exception")
    print(
        f"parser {parse_s * 1e6 / tried:.1f} us/input vs json.loads {loads_s * 1e6 / tried:.1f} us/input "
        f"(baseline, same inputs): ratio {parse_s / loads_s:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
