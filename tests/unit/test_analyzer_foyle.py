"""foyle's raw log lines: classification, trace halves joined in either order, LogEvents."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from learnerd.analyzer.fields import MalformedLine
from learnerd.analyzer.foyle import ingest_foyle_line, is_foyle_line
from learnerd.store.blocks import Cell
from learnerd.store.db import connect, transaction
from learnerd.store.foyle_traces import count_partial_traces


@pytest.fixture
def conn(tmp_path: Path):
    return connect(tmp_path / "db.sqlite")


@pytest.fixture(scope="module")
def lines(peer_data: Path) -> dict[str, list[dict]]:
    """Every line of foyle's real test logs, parsed, by file name."""
    out = {}
    for path in sorted((peer_data / "foyle").iterdir()):
        out[path.name] = [json.loads(line) for line in path.read_text().splitlines()]
    return out


def _gen(lines):
    g = lines["generate_trace_lines.jsonl"]
    return copy.deepcopy(g[0]), copy.deepcopy(g[4])  # the request half, the response half


def _exe(lines):
    e = lines["execute_traces_lines.jsonl"]
    return copy.deepcopy(e[0]), copy.deepcopy(e[1])


def _feed(conn, *objs):
    with transaction(conn):
        return [ingest_foyle_line(conn, o, now=1.0) for o in objs]


@pytest.mark.parametrize("order", ["request first", "response first"])
def test_generate_trace_halves_join_in_either_order(conn, lines, order):
    request, response = _gen(lines)
    first, second = (request, response) if order == "request first" else (response, request)
    out1, out2 = _feed(conn, first, second)
    assert out1.kind == "pending" and out1.trace_id == "2c4efb9372de3bb51d66d3f7e9c3a76a"
    assert out2.kind == "events" and out2.joined and count_partial_traces(conn) == 0
    assert [e.block_id for e in out2.events] == [b["id"] for b in response["response"]["blocks"]]
    ev = out2.events[1]
    assert ev.context == (
        Cell(
            "markup",
            "Use gcloud to read the logs for the cluster dev in project foyle-dev; assume you aready logged in",
            "markdown",
        ),
    )
    assert ev.generated == Cell("code", "gcloud container clusters get-credentials dev --project=foyle-dev\n", "bash")
    assert ev.time == response["time"] and ev.eval_mode is False and ev.source == "foyle"


def test_eval_mode_on_either_half_marks_the_blocks(conn, lines):
    request, response = _gen(lines)
    request["evalMode"] = True  # as in foyle's generate_trace_lines_eval_mode.jsonl
    _, out = _feed(conn, request, response)
    assert out.events and all(e.eval_mode for e in out.events)
    request, response = _exe(lines)
    request["request"]["block"]["id"] = "blk"
    response["evalMode"] = True
    _, out = _feed(conn, request, response)
    assert out.events[0].eval_mode is True


def test_execute_trace_gives_the_executed_cell_and_exit_code(conn, lines):
    request, response = _exe(lines)
    request["blockId"] = "blk-1"
    _, out = _feed(conn, request, response)
    (ev,) = out.events
    assert (ev.block_id, ev.exit_code) == ("blk-1", 0)
    assert ev.executed == Cell("code", "gcloud logging read --project=foyle-dev\n")
    assert ev.time == response["time"]


def test_execute_trace_with_empty_block_id_is_unjoinable(conn, lines):
    out = _feed(conn, *_exe(lines))
    assert [o.kind for o in out] == ["pending", "unjoinable"]
    assert out[1].reason == "empty_block_id" and out[1].trace_id == "43281a4e73cd76570e9851589207a8bd"
    assert count_partial_traces(conn) == 0


def test_generate_response_without_block_ids_is_unjoinable(conn, lines):
    request, response = _gen(lines)
    for b in response["response"]["blocks"]:
        b["id"] = ""
    assert _feed(conn, request, response)[1].reason == "no_block_ids"


def test_irrelevant_foyle_lines_are_skipped(conn, lines):
    logs = lines["foyle.logs.2024-04-16T19:06:47.json"]
    skipped = logs[:71] + logs[72:75] + lines["generate_trace_lines.jsonl"][1:4]
    assert all(is_foyle_line(o) for o in skipped)
    assert {o.kind for o in _feed(conn, *skipped)} == {"skipped"}
    assert count_partial_traces(conn) == 0


def test_log_event_execute_gives_the_selected_cell(conn, lines):
    execute = lines["foyle.logs.2024-04-16T19:06:47.json"][77]
    (out,) = _feed(conn, execute)
    (ev,) = out.events
    assert (ev.block_id, ev.exit_code) == ("23706965-8e3b-440d-ba1a-1e1cc035fbd4", None)
    assert ev.executed == Cell("code", "curl")
    assert not out.joined


def test_log_event_execute_reads_runme_success_as_exit_code(conn, lines):
    execute = copy.deepcopy(lines["foyle.logs.2024-04-16T19:06:47.json"][77])
    execute["event"]["cells"][1]["executionSummary"] = {"success": False}
    assert _feed(conn, execute)[0].events[0].exit_code == 1
    execute["event"]["cells"][1]["executionSummary"] = {"success": {"value": True}}
    assert _feed(conn, execute)[0].events[0].exit_code == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda e: (e["event"].pop("selectedId"), e.pop("selectedCellId")), "missing_selected_id"),
        (lambda e: e["event"]["cells"].pop(1), "cell_not_found"),
        (lambda e: e["event"]["cells"][1].update(kind="CELL_KIND_MARKUP"), "not_a_code_cell"),
    ],
)
def test_log_event_execute_unjoinable(conn, lines, change, reason):
    execute = copy.deepcopy(lines["foyle.logs.2024-04-16T19:06:47.json"][77])
    change(execute)
    (out,) = _feed(conn, execute)
    assert (out.kind, out.reason) == ("unjoinable", reason)


def test_log_event_accepted_and_rejected_set_the_suggestion_status(conn, lines):
    accepted = copy.deepcopy(lines["foyle.logs.2024-04-16T19:06:47.json"][76])
    (out,) = _feed(conn, accepted)
    statuses = [(e.block_id, e.suggestion_status) for e in out.events]
    assert statuses == [("23706965-8e3b-440d-ba1a-1e1cc035fbd4", "accepted")]
    accepted["event"]["type"] = "REJECTED"
    accepted["event"]["cells"] = [{"metadata": {"id": "c1"}}, {"metadata": {"runme.dev/id": "c2"}}, {"value": "no id"}]
    (out,) = _feed(conn, accepted)
    assert [(e.block_id, e.suggestion_status) for e in out.events] == [("c1", "rejected"), ("c2", "rejected")]
    accepted["event"]["type"] = "SESSION_START"
    assert _feed(conn, accepted)[0].kind == "skipped"


@pytest.mark.parametrize(
    "change",
    [
        lambda r, s: r.pop("traceId"),
        lambda r, s: r.update(traceId=""),
        lambda r, s: r.update(time="later"),
        lambda r, s: r["request"]["doc"].update(blocks="text"),
        lambda r, s: r["request"]["doc"]["blocks"][0].update(contents=5),
        lambda r, s: r.update(evalMode="yes"),
    ],
)
def test_bad_trace_halves_are_malformed_and_store_nothing(conn, lines, change):
    request, response = _gen(lines)
    change(request, response)
    with pytest.raises(MalformedLine), transaction(conn):
        ingest_foyle_line(conn, request, now=1.0)
    assert count_partial_traces(conn) == 0


def test_log_event_without_an_event_object_is_malformed(conn, lines):
    execute = copy.deepcopy(lines["foyle.logs.2024-04-16T19:06:47.json"][77])
    execute["event"] = "EXECUTE"
    with pytest.raises(MalformedLine, match="event"), transaction(conn):
        ingest_foyle_line(conn, execute, now=1.0)
