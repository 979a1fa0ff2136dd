"""Sum a pytest log's ``--durations=0`` table per test module, as the Markdown table of docs/testing.md.

Run: ``python .ci/durations.py pytest.log`` (or pipe the log in). Prints one row per module, longest first:
the module, its tests, and the seconds of setup, call and teardown summed (pytest lists every phase of at least
0.005 s with ``--durations=0``; under ``-n 2`` the phases of one worker's fixtures fall on the first test that
asks for them, and a fixture waiting on the artefact cache's lock counts its wait). The last rows are the total
of all workers together and the wall time of pytest's summary line (``N passed ... in S s``).
"""

from __future__ import annotations

import collections
import fileinput
import re

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?\.py)::(\S.*)$")
SUMMARY = re.compile(r"^(?:=+ )?((?:\d+ \w+(?:, )?)+) in (\d+(?:\.\d+)?)s")
"""pytest's last line, e.g. ``==== 1526 passed, 40 skipped in 1790.12s (0:29:50) ====`` (without ``=`` under
``-q``)."""


def main() -> None:
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, set[str]] = collections.defaultdict(set)
    summary: tuple[str, float] | None = None
    with fileinput.input() as lines:
        for line in lines:
            if match := LINE.match(line):
                duration, _, module, test = match.groups()
                seconds[module] += float(duration)
                tests[module].add(test)
            elif match := SUMMARY.match(line.strip()):
                summary = match.group(1), float(match.group(2))
    print("| module | tests timed | seconds |")
    print("|---|---:|---:|")
    for module, total in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"| `{module}` | {len(tests[module])} | {total:.0f} |")
    print(f"| **all workers** | {sum(len(t) for t in tests.values())} | {sum(seconds.values()):.0f} |")
    if summary is not None:
        outcome, wall = summary
        print(f"| **wall time** ({outcome}) | | {wall:.0f} |")


if __name__ == "__main__":
    main()
