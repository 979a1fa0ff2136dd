"""Reading a log file from a watermark in bounded batches of complete lines (TN005's ``readLinesFromOffset``).

:func:`read_batch` reads forward from a byte offset and returns the lines it may consume plus the
offset and line count just past them — the watermark the caller commits together with whatever the
lines produced. Rules:

- A line is complete when its LF has been written. The bytes after the last LF are a partial line
  and are not consumed (the writer has not finished it), with one exception: when they are, by
  themselves, a complete JSON object (``{...}``) they are consumed as a line. A JSON object is
  self-delimiting — no proper prefix of one is itself a valid JSON object — so such a tail is a
  whole record whose writer has not (yet) added the LF; foyle's own test logs end that way. When the
  LF, or more bytes, arrive later they are the rest of that already-consumed line: whitespace is
  ignored, anything else is reported as a *continuation* line (the caller counts it as malformed).
- A line longer than ``max_line_bytes`` (LF excluded) is never held in memory: it is scanned in
  ``chunk_size`` pieces up to its LF and returned with ``data=None`` and its length. An oversized
  line without its LF yet is not consumed either.
- A batch stops after ``max_lines`` lines or once ``max_bytes`` bytes are consumed (one longer
  line still forms a batch of its own), so one transaction stays small.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class RawLine:
    """One consumed line. ``number`` is 1-based; ``length`` in bytes, the LF excluded.

    ``data`` is the line's bytes without the LF, or None for an oversized line (not read).
    ``continuation`` marks bytes that completed a line consumed earlier without its LF; ``number``
    is then that line's number.
    """

    number: int
    data: bytes | None
    length: int
    continuation: bool = False


@dataclass(frozen=True)
class Batch:
    """The lines of one batch and the watermark just past them.

    ``end_offset`` (bytes) and ``end_line`` (lines consumed in the whole file) are where the next
    batch starts; ``mid_line`` is True when the last consumed line was a JSON object without its LF.
    """

    lines: list[RawLine] = field(default_factory=list)
    end_offset: int = 0
    end_line: int = 0
    mid_line: bool = False


def read_batch(
    fd: int,
    offset: int,
    line: int,
    *,
    mid_line: bool,
    max_lines: int,
    max_bytes: int,
    max_line_bytes: int,
    chunk_size: int = CHUNK_BYTES,
) -> Batch:
    """Read the next batch of complete lines of the open file ``fd`` from byte ``offset``.

    Args:
        fd: a file descriptor open for reading (read with ``os.pread``; its position is not used).
        offset: where to start, bytes; ``line``: lines before ``offset``.
        mid_line: the line before ``offset`` was consumed without its LF (see the module rules).
        max_lines, max_bytes: batch bounds; ``max_line_bytes``: longer lines are oversized.

    Returns:
        A :class:`Batch`; its ``lines`` are empty when nothing complete follows ``offset``.

    Raises:
        OSError: reading failed.
    """
    lines: list[RawLine] = []
    pos = offset  # file offset of buf[start]
    buf = b""
    start = 0
    search = 0
    current = line
    continuation = mid_line
    at_eof = False
    while len(lines) < max_lines and pos - offset < max_bytes:
        nl = buf.find(b"\n", search)
        if nl < 0:
            pending = len(buf) - start
            if pending > max_line_bytes:
                found = _skip_to_newline(fd, pos + pending, chunk_size)
                if found is None:
                    break  # an oversized line still being written
                nl_pos, rest = found
                if not continuation:
                    current += 1
                lines.append(RawLine(current, None, nl_pos - pos, continuation))
                continuation = False
                pos, buf, start, search = nl_pos + 1, rest, 0, 0
                continue
            chunk = os.pread(fd, chunk_size, pos + pending)
            if not chunk:
                at_eof = True
                break
            buf = buf[start:] + chunk
            start, search = 0, pending
            continue
        length = nl - start
        if not continuation:
            current += 1
        data = buf[start:nl] if length <= max_line_bytes else None
        lines.append(RawLine(current, data, length, continuation))
        continuation = False
        pos += length + 1
        start = search = nl + 1
    ends_mid_line = mid_line and not lines
    if at_eof and not continuation and len(lines) < max_lines:
        tail = buf[start:]
        if tail and _is_json_object(tail):
            current += 1
            lines.append(RawLine(current, tail, len(tail)))
            pos += len(tail)
            ends_mid_line = True
    return Batch(lines, pos, current, ends_mid_line)


def _skip_to_newline(fd: int, pos: int, chunk_size: int) -> tuple[int, bytes] | None:
    """Scan from ``pos`` to the next LF without keeping what is read: (LF's offset, bytes after it
    in the last chunk), or None at end of file."""
    while True:
        chunk = os.pread(fd, chunk_size, pos)
        if not chunk:
            return None
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i, chunk[i + 1 :]
        pos += len(chunk)


def _is_json_object(data: bytes) -> bool:
    stripped = data.rstrip()
    if not stripped.endswith(b"}"):
        return False
    try:
        return isinstance(json.loads(stripped), dict)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False
