"""Reading complete lines from a watermark: batching, partial lines, oversized lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from learnerd.analyzer.tail import Batch, read_batch


@pytest.fixture
def log(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"")
    fds: list[int] = []

    def read(
        content: bytes | None = None,
        offset: int = 0,
        line: int = 0,
        mid_line: bool = False,
        max_lines: int = 1000,
        max_bytes: int = 1 << 20,
        max_line_bytes: int = 1 << 20,
        chunk_size: int = 7,
    ) -> Batch:
        if content is not None:
            path.write_bytes(content)
        fd = os.open(path, os.O_RDONLY)
        fds.append(fd)
        return read_batch(
            fd,
            offset,
            line,
            mid_line=mid_line,
            max_lines=max_lines,
            max_bytes=max_bytes,
            max_line_bytes=max_line_bytes,
            chunk_size=chunk_size,
        )

    yield read
    for fd in fds:
        os.close(fd)


def _data(batch: Batch) -> list[bytes | None]:
    return [raw.data for raw in batch.lines]


def test_reads_complete_lines_and_reports_the_watermark(log):
    content = b'{"a":1}\n\n{"b":22}\r\n'
    batch = log(content)
    assert _data(batch) == [b'{"a":1}', b"", b'{"b":22}\r']
    assert [raw.number for raw in batch.lines] == [1, 2, 3]
    assert (batch.end_offset, batch.end_line, batch.mid_line) == (len(content), 3, False)


def test_continues_from_an_offset(log):
    content = b"one\ntwo\nthree\n"
    batch = log(content, offset=4, line=1)
    assert _data(batch) == [b"two", b"three"] and [r.number for r in batch.lines] == [2, 3]


def test_partial_last_line_is_not_consumed(log):
    batch = log(b'{"a":1}\n{"b":')
    assert _data(batch) == [b'{"a":1}'] and batch.end_offset == 8 and batch.end_line == 1
    assert log(offset=8, line=1).lines == []  # still waiting


def test_a_last_line_that_is_a_whole_json_object_is_consumed_without_its_lf(log):
    batch = log(b'{"a":1}\n{"b":{"c":2}} ')
    assert _data(batch) == [b'{"a":1}', b'{"b":{"c":2}} ']
    assert (batch.end_offset, batch.end_line, batch.mid_line) == (len(b'{"a":1}\n{"b":{"c":2}} '), 2, True)


@pytest.mark.parametrize("tail", [b'{"b":{"c":2}', b"[1, 2]", b"42", b'{"b": "}', b'{"x":"\xff"}'])
def test_a_tail_that_is_not_a_whole_json_object_waits(log, tail):
    batch = log(b"x\n" + tail)
    assert _data(batch) == [b"x"] and batch.end_offset == 2


def test_the_rest_of_a_line_consumed_without_its_lf_is_a_continuation(log):
    first = b'{"a":1}'
    batch = log(first + b"\n" + b'{"b":2}\n', offset=len(first), line=1, mid_line=True)
    assert [(r.number, r.data, r.continuation) for r in batch.lines] == [(1, b"", True), (2, b'{"b":2}', False)]
    batch = log(first + b'garbage\n{"b":2}\n', offset=len(first), line=1, mid_line=True)
    assert [(r.number, r.data, r.continuation) for r in batch.lines] == [(1, b"garbage", True), (2, b'{"b":2}', False)]
    # Without its LF the rest is not consumed, even when it looks like JSON.
    batch = log(first + b'{"c":3}', offset=len(first), line=1, mid_line=True)
    assert batch.lines == [] and batch.mid_line is True


def test_batches_stop_at_max_lines(log):
    content = b"".join(b"line %d\n" % i for i in range(10))
    batch = log(content, max_lines=4)
    assert len(batch.lines) == 4 and batch.end_line == 4
    rest = log(offset=batch.end_offset, line=batch.end_line, max_lines=100)
    assert [r.number for r in rest.lines] == list(range(5, 11)) and rest.end_offset == len(content)


def test_batches_stop_once_max_bytes_are_consumed(log):
    content = b"".join(b"%09d\n" % i for i in range(10))  # 10-byte lines
    batch = log(content, max_bytes=25)
    assert len(batch.lines) == 3 and batch.end_offset == 30
    # A single line longer than max_bytes still makes progress.
    batch = log(b"x" * 100 + b"\nshort\n", max_bytes=10)
    assert [r.length for r in batch.lines] == [100]


@pytest.mark.parametrize("chunk_size", [3, 64, 1 << 16])
def test_oversized_lines_are_reported_by_length_without_their_bytes(log, chunk_size):
    limit = 50
    content = b"a" * limit + b"\n" + b"b" * (limit + 1) + b"\n" + b"c" * (10 * limit) + b"\nok\n"
    batch = log(content, max_line_bytes=limit, chunk_size=chunk_size)
    assert [(r.number, r.length, r.data is None) for r in batch.lines] == [
        (1, limit, False),
        (2, limit + 1, True),
        (3, 10 * limit, True),
        (4, 2, False),
    ]
    assert batch.lines[0].data == b"a" * limit and batch.end_offset == len(content)


def test_an_oversized_line_without_its_lf_waits(log):
    batch = log(b"ok\n" + b"z" * 500, max_line_bytes=50)
    assert _data(batch) == [b"ok"] and batch.end_offset == 3


def test_empty_file_and_end_of_file(log):
    assert log(b"").lines == []
    assert log(b"a\n", offset=2, line=1).lines == []
