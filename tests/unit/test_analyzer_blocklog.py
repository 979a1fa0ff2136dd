"""learnerd's block-log format: what parses, what is malformed, what is an unknown event."""

from __future__ import annotations

import json

import pytest

from learnerd.analyzer.blocklog import event_line, parse_event
from learnerd.analyzer.fields import MalformedLine, UnknownEvent, parse_time
from learnerd.store.blocks import Cell


def _event(**fields: object) -> dict:
    base = {"learnerd": 1, "type": "executed", "block_id": "b1", "time": 100.5}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


def test_context_event_carries_cells_in_order():
    ev = parse_event(
        _event(
            type="context",
            cells=[{"kind": "markup", "text": "List pods"}, {"kind": "code", "text": "ls", "language": "bash"}],
        )
    )
    assert ev.block_id == "b1" and ev.source == "learnerd" and ev.time == 100.5
    assert ev.context == (Cell("markup", "List pods", ""), Cell("code", "ls", "bash"))
    assert ev.generated is None and ev.executed is None and ev.eval_mode is False


def test_generated_event_accepts_any_cell_kind():
    ev = parse_event(_event(type="generated", cell={"kind": "markup", "text": "Run this:"}, eval_mode=True))
    assert ev.generated == Cell("markup", "Run this:", "") and ev.eval_mode is True


def test_executed_event_carries_exit_code_or_null():
    ev = parse_event(_event(cell={"kind": "code", "text": "kubectl get pods", "language": "bash"}, exit_code=2))
    assert ev.executed == Cell("code", "kubectl get pods", "bash") and ev.exit_code == 2
    ev = parse_event(_event(cell={"kind": "code", "text": "x"}, exit_code=None))
    assert ev.exit_code is None


@pytest.mark.parametrize("event_type", ["context", "generated", "executed"])
def test_every_event_may_name_its_session(event_type):
    cell = Cell("markup" if event_type == "context" else "code", "kubectl get pods")
    kwargs = {"cells": [cell]} if event_type == "context" else {"cell": cell, "exit_code": 0}
    if event_type == "generated":
        kwargs.pop("exit_code")
    line = event_line(event_type, "b1", 1.0, session="claude-5d1e", **kwargs)
    assert parse_event(json.loads(line)).session == "claude-5d1e"
    assert parse_event(json.loads(event_line(event_type, "b1", 1.0, **kwargs))).session is None


def test_unlisted_keys_are_ignored():
    ev = parse_event(_event(cell={"kind": "code", "text": "x", "tokens": 3}, exit_code=0, writer="v2.1"))
    assert ev.executed == Cell("code", "x", "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1714564800, 1714564800.0),
        (1714564800.25, 1714564800.25),
        ("2024-05-01T12:00:00Z", 1714564800.0),
        ("2024-05-01T12:00:00.250Z", 1714564800.25),
        ("2024-05-01t12:00:00z", 1714564800.0),
        ("2024-05-01T14:00:00+02:00", 1714564800.0),
        ("2024-05-01T12:00:00.123456789Z", 1714564800.123456),
    ],
)
def test_times_in_rfc3339_or_epoch_seconds(value, expected):
    assert parse_time(value) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "value",
    ["2024-05-01T12:00:00", "2024-05-01", "yesterday", True, -1, float("inf"), None, [1], "2024-13-01T00:00:00Z"],
)
def test_bad_times_are_malformed(value):
    with pytest.raises(MalformedLine):
        parse_time(value)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"learnerd": "1"}, "learnerd"),
        ({"learnerd": 0}, "version"),
        ({"type": 3}, "type"),
        ({"type": ...}, "type"),
        ({"block_id": ...}, "block_id"),
        ({"block_id": ""}, "block_id"),
        ({"block_id": "x" * 257}, "block_id"),
        ({"block_id": 7}, "block_id"),
        ({"time": ...}, "time"),
        ({"time": "soon"}, "time"),
        ({"cell": ...}, "cell"),
        ({"cell": "ls"}, "cell"),
        ({"cell": {"kind": "code"}}, "cell.text"),
        ({"cell": {"kind": "shell", "text": "ls"}}, "cell.kind"),
        ({"cell": {"kind": "code", "text": "ls", "language": 5}}, "cell.language"),
        ({"cell": {"kind": "markup", "text": "ls"}}, "code"),
        ({"exit_code": ...}, "exit_code"),
        ({"exit_code": "0"}, "exit_code"),
        ({"exit_code": True}, "exit_code"),
        ({"exit_code": 1.5}, "exit_code"),
        ({"eval_mode": "yes"}, "eval_mode"),
        ({"session": 7}, "session"),
        ({"session": ""}, "session"),
        ({"session": "s" * 257}, "session"),
        ({"type": "context", "cells": ...}, "cells"),
        ({"type": "context", "cells": {"kind": "markup"}}, "cells"),
        ({"type": "context", "cells": [{"kind": "markup", "text": 1}]}, "cells[0].text"),
    ],
)
def test_missing_or_ill_typed_fields_are_malformed(fields, needle):
    obj = _event(cell={"kind": "code", "text": "ls"}, exit_code=0)
    obj.update(fields)
    obj = {k: v for k, v in obj.items() if v is not ...}
    with pytest.raises(MalformedLine, match=needle.replace("[", r"\[").replace("]", r"\]")):
        parse_event(obj)


@pytest.mark.parametrize("fields", [{"type": "deleted"}, {"type": "EXECUTED"}, {"learnerd": 2}])
def test_unknown_types_and_newer_versions_are_unknown_events(fields):
    with pytest.raises(UnknownEvent):
        parse_event(_event(cell={"kind": "code", "text": "ls"}, exit_code=0, **fields))


def test_event_line_round_trips():
    cells = [Cell("markup", "Find the merge base — ünïcode"), Cell("code", "git log", "bash")]
    line = event_line("context", "b-9", "2024-05-01T12:00:00Z", cells=cells, eval_mode=True)
    assert line.endswith("\n") and line.count("\n") == 1
    ev = parse_event(json.loads(line))
    assert ev.context == tuple(cells) and ev.eval_mode is True and ev.time == 1714564800.0
    ev = parse_event(json.loads(event_line("executed", "b-9", 5.0, cell=Cell("code", "ls"), exit_code=None)))
    assert ev.executed == Cell("code", "ls") and ev.exit_code is None


def test_event_line_refuses_what_would_not_parse():
    with pytest.raises(ValueError):
        event_line("executed", "b", 1.0, cell=Cell("markup", "prose"), exit_code=0)
    with pytest.raises(ValueError):
        event_line("context", "b", 1.0)
    with pytest.raises(ValueError):
        event_line("renamed", "b", 1.0)
