"""``POST /v1/blocks``' body parser validates each event as the analyzer validates a log line and names the bad
event's index; the ingest log it appends to keeps lines whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from learnerd.analyzer.blocklog import event_line
from learnerd.api.blocks import parse_events
from learnerd.api.errors import BadRequest
from learnerd.store.blocks import Cell
from learnerd.store.ingest_log import IngestLog

CONTEXT = json.loads(event_line("context", "b1", 1714564800.0, cells=[Cell("markup", "list the pods")]))
EXECUTED = json.loads(
    event_line("executed", "b1", "2024-05-01T12:00:09Z", cell=Cell("code", "kubectl get pods", "bash"), exit_code=0)
)
MAX_LINE = 4 * 1024 * 1024


def lines_of(body: bytes, max_line_bytes: int = MAX_LINE) -> list[dict]:
    lines, _ = parse_events(body, max_line_bytes=max_line_bytes)
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    return [json.loads(line) for line in lines]


def test_a_json_array_and_json_lines_give_the_same_lines() -> None:
    array = json.dumps([CONTEXT, EXECUTED]).encode()
    jsonl = b"\r\n".join(json.dumps(e).encode() for e in (CONTEXT, EXECUTED)) + b"\n\n"
    assert lines_of(array) == lines_of(jsonl) == [CONTEXT, EXECUTED]
    assert parse_events(b"\n" + jsonl, max_line_bytes=MAX_LINE)[1] == ["b1"]


def test_unknown_keys_are_kept_as_the_format_allows() -> None:
    assert lines_of(json.dumps([{**EXECUTED, "session": "s1"}]).encode())[0]["session"] == "s1"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({k: v for k, v in EXECUTED.items() if k != "exit_code"}, "missing field 'exit_code'"),
        ({**EXECUTED, "type": "deleted"}, "unknown event"),
        ({**EXECUTED, "learnerd": 2}, "unknown event"),
        ({**EXECUTED, "time": "yesterday"}, "RFC 3339"),
        ({**EXECUTED, "cell": {"kind": "markup", "text": "x"}}, "kind 'code'"),
        ({**EXECUTED, "exit_code": 2**63}, "64-bit"),
        ({**EXECUTED, "block_id": "a\u0000b"}, "NUL"),
        ({**EXECUTED, "time": 1e300}, "more than a day after now"),
        ({"level": "info", "msg": "another program's line"}, "not a block-log event"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_a_bad_event_is_refused_with_its_index(bad, reason: str) -> None:
    for body in (
        json.dumps([CONTEXT, EXECUTED, bad]).encode(),
        b"\n".join(json.dumps(e).encode() for e in (CONTEXT, EXECUTED, bad)),
    ):
        with pytest.raises(BadRequest) as refused:
            parse_events(body, max_line_bytes=MAX_LINE)
        assert refused.value.fields == {"index": 2}
        assert str(refused.value).startswith("event 2: ") and reason in str(refused.value)


def test_a_line_that_is_not_json_in_json_lines_names_its_index() -> None:
    body = json.dumps(CONTEXT).encode() + b"\n{not json\n" + json.dumps(EXECUTED).encode()
    with pytest.raises(BadRequest) as refused:
        parse_events(body, max_line_bytes=MAX_LINE)
    assert refused.value.fields == {"index": 1}


@pytest.mark.parametrize("body", [b"", b" \n\n", b"[]", b"[1, ", b'["\\ud800"]', b"[" * 40 + b"]" * 40])
def test_a_body_without_events_or_not_json_is_refused(body: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_events(body, max_line_bytes=MAX_LINE)


def test_a_line_over_max_line_bytes_is_refused_as_the_analyzer_would_skip_it() -> None:
    body = json.dumps([CONTEXT, EXECUTED]).encode()
    longest = max(len(json.dumps(e, separators=(",", ":"))) for e in (CONTEXT, EXECUTED))
    assert lines_of(body, max_line_bytes=longest) == [CONTEXT, EXECUTED]
    with pytest.raises(BadRequest) as refused:
        parse_events(body, max_line_bytes=longest - 1)
    assert "max_line_bytes" in str(refused.value)


def test_the_ingest_log_appends_whole_lines_to_the_file_of_the_utc_day(tmp_path: Path) -> None:
    now = datetime(2024, 5, 1, 23, 59, 59, tzinfo=UTC).timestamp()
    log = IngestLog(tmp_path / "ingest", clock=lambda: now)
    path = log.append([b'{"a":1}\n', b'{"b":2}\n'])
    assert path == tmp_path / "ingest" / "http-20240501.jsonl"
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    with path.open("ab") as torn:  # what a power loss in the middle of an append can leave
        torn.write(b'{"c":')
    log.append([b'{"d":4}\n'])
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n{"c":\n{"d":4}\n'
    now += 1
    assert log.append([b'{"e":5}\n']).name == "http-20240502.jsonl"
