"""Which formats a log file holds, judged as the analyzer judges them: each record of its first
:data:`SNIFF_RECORDS` offered to the registry's readers of its framing (``learnerd sources``)."""

from __future__ import annotations

import json
from collections import Counter

from learnerd.analyzer import registry
from learnerd.analyzer.reader import JSON_LINES, SQLITE_ROWS, framing_of
from learnerd.analyzer.sqlite_source import read_rows

SNIFF_RECORDS = 200
"""Records read from the start of a file to tell its formats."""
MAX_SNIFF_BYTES = 4 * 1024 * 1024
"""At most this much of a JSON-lines file is read to tell its formats."""
FOREIGN = "foreign"
"""The name counted for records no reader detects."""


def file_formats(path: str) -> Counter[str]:
    """How many of the first :data:`SNIFF_RECORDS` records of ``path`` each reader detects (by reader name;
    :data:`FOREIGN` for records none does). Lines that are not JSON objects are not counted.

    Raises:
        OSError: the file cannot be read (:class:`~learnerd.analyzer.sqlite_source.SourceUnreadable` for a
            SQLite database that is locked or holds no such table).
    """
    framing = framing_of(path)
    if framing is SQLITE_ROWS:
        rows, _ = read_rows(
            path,
            SQLITE_ROWS.table,
            0,
            SNIFF_RECORDS,
            columns=registry.columns(SQLITE_ROWS),
            max_value_bytes=MAX_SNIFF_BYTES,
            max_batch_bytes=MAX_SNIFF_BYTES,
        )
        records = rows
    else:
        framing = JSON_LINES
        with open(path, "rb") as f:
            head = f.read(MAX_SNIFF_BYTES)
        records = []
        for line in head.splitlines()[:SNIFF_RECORDS]:
            try:
                record = json.loads(line.removeprefix(b"\xef\xbb\xbf"))
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                records.append(record)
    counts: Counter[str] = Counter()
    for record in records:
        reader = registry.reader_for(record, framing)
        counts[reader.name if reader is not None else FOREIGN] += 1
    return counts
