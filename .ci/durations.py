"""Sum a pytest log's ``--durations=0`` table per test module, as the Markdown table of docs/testing.md.

Run: ``python .ci/durations.py pytest.log`` (or pipe the log in). Prints one row per module, longest first:
the module, its tests, and the seconds of setup, call and teardown summed (pytest lists every phase of at least
0.005 s with ``--durations=0``; under ``-n 2`` the phases of one worker's fixtures fall on the first test that
asks for them). The total is the pytest time of all workers together, not the wall time.
"""

from __future__ import annotations

import collections
import fileinput
import re

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?\.py)::(\S.*)$")


def main() -> None:
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, set[str]] = collections.defaultdict(set)
    with fileinput.input() as lines:
        for line in lines:
            match = LINE.match(line)
            if match:
                duration, _, module, test = match.groups()
                seconds[module] += float(duration)
                tests[module].add(test)
    print("| module | tests timed | seconds |")
    print("|---|---:|---:|")
    for module, total in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"| `{module}` | {len(tests[module])} | {total:.0f} |")
    print(f"| **all** | {sum(len(t) for t in tests.values())} | {sum(seconds.values()):.0f} |")


if __name__ == "__main__":
    main()
