"""Suggestions: an answer served, then an execution in its session read from learnerd's block log by the
analyzer's intake, gives the answer's adapter version an outcome — accepted, edited, failed — once, within the join
window; nothing else resolves it (no session, another program's session, the same command alone); old ones are
pruned."""

from __future__ import annotations

import json

import pytest

from learnerd.analyzer import ingest
from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.tail import RawLine
from learnerd.store import db, suggestions
from learnerd.store.blocks import BlockEvent, Cell, apply_event, get_block
from learnerd.store.suggestions import (
    BLOCK_OPENS_WITHIN,
    ServedAnswer,
    answer_end,
    command_of,
    counts,
    first_block_end,
    get_suggestion,
    prune,
    record,
)

SERVED_AT = 1_800_000_000.0
WINDOW_S = 600.0
DOC = "01KPPJZWBDDDYRESSA0HESRDHT"
ANSWER = "List them with:\n```bash\nkubectl get  pods -n dev\n```\nThat shows every pod."


@pytest.fixture
def conn(tmp_path):
    conn = db.connect(tmp_path / "learnerd.db")
    yield conn
    conn.close()


def serve(conn, session: str | None = "S", answer: str = ANSWER, at: float = SERVED_AT) -> str:
    served = ServedAnswer(
        document=DOC,
        version="v0002",
        session=session,
        turns=(("system", "You are terse."), ("user", "Which pods run in dev?")),
        answer=answer,
        retrieved=("ex-1", "ex-2"),
        served_at=at,
    )
    with db.transaction(conn):
        return record(conn, served, now=at)


def run(
    conn, command: str, *, at: float, exit_code: int | None = 0, session: str | None = "S", block_id: str = "ran-1"
) -> ingest.LineResult:
    """One block-log line saying ``command`` ran, through the analyzer's intake (with the join)."""
    line = event_line(
        "executed", block_id, at, cell=Cell("code", command, "bash"), exit_code=exit_code, session=session
    )
    raw = RawLine(1, line.rstrip("\n").encode(), len(line) - 1)
    with db.transaction(conn):
        return ingest.ingest_line(conn, raw, at, join_window_s=WINDOW_S)


def totals(conn) -> dict[str, int]:
    return counts(conn)[DOC]["v0002"]


def test_the_served_answer_is_a_block_with_the_prompt_and_the_suggested_command(conn):
    block_id = serve(conn)
    block = get_block(conn, block_id)
    assert block.source == suggestions.SOURCE and block.session == "S"
    assert block.context == [Cell("markup", "Which pods run in dev?")], "system turns are not the person's intent"
    assert block.generated == Cell("code", "kubectl get  pods -n dev", "bash")
    assert block.executed is None
    row = get_suggestion(conn, block_id)
    assert (row.command, row.answer, row.retrieved, row.outcome) == (
        "kubectl get pods -n dev",
        ANSWER,
        ["ex-1", "ex-2"],
        None,
    )
    assert totals(conn) == {"served": 1, "accepted": 0, "edited": 0, "failed": 0}


def test_the_same_command_run_in_the_session_is_accepted_and_the_block_gains_the_execution(conn):
    block_id = serve(conn)
    result = run(conn, "kubectl   get pods -n dev\n", at=SERVED_AT + 30)
    assert block_id in result.changed, "the served block changed: its example is reconciled"
    assert get_suggestion(conn, block_id).outcome == "accepted"
    assert get_suggestion(conn, block_id).resolved_by == "ran-1"
    block = get_block(conn, block_id)
    assert (block.executed.text, block.exit_code) == ("kubectl   get pods -n dev\n", 0)
    assert totals(conn) == {"served": 1, "accepted": 1, "edited": 0, "failed": 0}


def test_something_else_run_in_the_session_is_an_edit(conn):
    block_id = serve(conn)
    run(conn, "kubectl get pods -n dev -o wide", at=SERVED_AT + 30)
    assert get_suggestion(conn, block_id).outcome == "edited"
    assert get_block(conn, block_id).executed.text == "kubectl get pods -n dev -o wide"
    assert totals(conn) == {"served": 1, "accepted": 0, "edited": 1, "failed": 0}


def test_the_same_command_failing_is_a_failed_suggestion(conn):
    block_id = serve(conn)
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 30, exit_code=1)
    assert get_suggestion(conn, block_id).outcome == "failed"
    assert get_block(conn, block_id).exit_code == 1
    assert totals(conn) == {"served": 1, "accepted": 0, "edited": 0, "failed": 1}


def test_an_execution_after_the_window_resolves_nothing(conn):
    block_id = serve(conn)
    result = run(conn, "kubectl get pods -n dev", at=SERVED_AT + WINDOW_S + 1)
    assert block_id not in result.changed
    assert get_suggestion(conn, block_id).outcome is None
    assert get_block(conn, block_id).executed is None
    assert totals(conn)["accepted"] == 0


def test_an_execution_before_the_answer_resolves_nothing(conn):
    block_id = serve(conn)
    run(conn, "kubectl get pods -n dev", at=SERVED_AT - 1)
    assert get_suggestion(conn, block_id).outcome is None


def test_without_a_session_not_even_the_identical_command_resolves_an_answer(conn):
    """An identical command is no evidence that the person asked the question: whoever asked for a command that
    someone later runs would otherwise make their prompt the runner's example (issue 60, finding 2)."""
    unclaimed = serve(conn, session=None, at=SERVED_AT)
    claimed = serve(conn, session="S", at=SERVED_AT + 10)
    result = run(conn, "kubectl get pods -n dev", at=SERVED_AT + 20, session=None)
    assert result.changed == ["ran-1"], "only the executed block changed"
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 21, session="T", block_id="ran-2")
    assert (get_suggestion(conn, unclaimed).outcome, get_suggestion(conn, claimed).outcome) == (None, None)
    assert get_block(conn, unclaimed).executed is None and get_block(conn, claimed).executed is None
    assert totals(conn)["accepted"] == 0


def test_an_assistant_transcript_in_a_claimed_session_never_resolves_the_answer(conn):
    """A client of the endpoint that names a Claude Code session (its ``sessionId``) as its own cannot make that
    program's run of the command resolve the answer: only learnerd's block log joins (``resolves_served``)."""
    session = "5d1e0b7a-3c2f-4e8a-9b61-0f2d4c6a8e10"
    block_id = serve(conn, session=session)
    call = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "kubectl get pods -n dev"}}
    done = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok", "is_error": False}
    for number, (role, content, seconds) in enumerate((("assistant", [call], 5), ("user", [done], 6)), start=1):
        record = {"type": role, "sessionId": session, "uuid": f"u{number}", "cwd": "/srv", "timestamp": SERVED_AT}
        line = json.dumps({**record, "timestamp": SERVED_AT + seconds, "message": {"role": role, "content": content}})
        with db.transaction(conn):
            ingest.ingest_line(
                conn, RawLine(number, line.encode(), len(line)), SERVED_AT + seconds, join_window_s=WINDOW_S
            )
    ran = get_block(conn, f"claude-code:{session}:toolu_01")
    assert ran is not None and ran.executed.text == "kubectl get pods -n dev", "the transcript was read"
    assert get_suggestion(conn, block_id).outcome is None and get_block(conn, block_id).executed is None


def test_a_suggestion_of_another_session_is_never_resolved(conn):
    block_id = serve(conn, session="S")
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 5, session="T")
    assert get_suggestion(conn, block_id).outcome is None


def test_a_session_another_source_gave_the_executed_block_does_not_count(conn):
    block_id = serve(conn, session="S")
    with db.transaction(conn):
        event = BlockEvent("ran-1", "atuin", SERVED_AT + 1, context=(Cell("markup", "x"),), session="S")
        apply_event(conn, event, SERVED_AT + 1)  # an event more than a day after now would be refused
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 5, session=None)
    assert get_suggestion(conn, block_id).outcome is None


def test_the_session_may_come_from_an_earlier_event_of_the_executed_block(conn):
    block_id = serve(conn, session="S")
    context = event_line("context", "ran-1", SERVED_AT + 1, cells=[Cell("markup", "pods?")], session="S")
    with db.transaction(conn):
        ingest.ingest_line(conn, RawLine(1, context.strip().encode(), len(context) - 1), SERVED_AT + 1)
    run(conn, "kubectl get pods -n dev -A", at=SERVED_AT + 5, session=None)
    assert get_suggestion(conn, block_id).outcome == "edited"


def test_an_execution_read_again_counts_once_and_resolves_one_suggestion(conn):
    first = serve(conn, at=SERVED_AT)
    second = serve(conn, at=SERVED_AT + 1)
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 5)
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 5)
    assert (get_suggestion(conn, first).outcome, get_suggestion(conn, second).outcome) == (None, "accepted")
    assert totals(conn) == {"served": 2, "accepted": 1, "edited": 0, "failed": 0}


def test_the_first_execution_resolves_a_suggestion_for_good(conn):
    block_id = serve(conn)
    run(conn, "kubectl get pods", at=SERVED_AT + 5, block_id="ran-1")
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 6, block_id="ran-2")
    assert get_suggestion(conn, block_id).outcome == "edited"
    assert totals(conn) == {"served": 1, "accepted": 0, "edited": 1, "failed": 0}


def test_pruning_removes_old_suggestions_and_their_unrun_blocks_but_keeps_counts_and_learned_blocks(conn):
    unrun = serve(conn, at=SERVED_AT)
    ran = serve(conn, session="R", at=SERVED_AT + 1)
    recent = serve(conn, at=SERVED_AT + 100)
    run(conn, "kubectl get pods -n dev", at=SERVED_AT + 2, session="R")
    with db.transaction(conn):
        assert prune(conn, before=SERVED_AT + 50) == 2
    assert get_suggestion(conn, unrun) is None and get_block(conn, unrun) is None
    assert get_suggestion(conn, ran) is None
    assert get_block(conn, ran).executed.text == "kubectl get pods -n dev", "a block that ran is a learned block"
    assert get_suggestion(conn, recent) is not None and get_block(conn, recent) is not None
    assert totals(conn) == {"served": 3, "accepted": 1, "edited": 0, "failed": 0}


@pytest.mark.parametrize(
    ("answer", "cell"),
    [
        ("ls -la", Cell("code", "ls -la")),
        ("  git status\n", Cell("code", "git status")),
        ("Run:\n```sh\nmake test\n```\nthen\n```\nmake\n```", Cell("code", "make test", "sh")),
        ("~~~bash\nfind . -name '*.py'\n~~~", Cell("code", "find . -name '*.py'", "bash")),
        # CommonMark 0.31, 4.5: a fence never closed runs to the end (a model stopped, or was cut, before closing it)
        ("```bash\nsudo chown -R `whoami` /usr/local", Cell("code", "sudo chown -R `whoami` /usr/local", "bash")),
        ("````sh\necho '```'\n``````\nafter", Cell("code", "echo '```'", "sh")),  # closed by a longer fence only
        ("Steps:\n\n- first\n\n  ```bash\n  make\n  ```", Cell("code", "make", "bash")),  # inside a list item
        ("> ```\n> uptime\n> ```", Cell("code", "uptime")),  # inside a block quote
        ("    ls -la\n", Cell("code", "ls -la")),  # an indented code block is not a fence: the whole answer
    ],
)
def test_the_suggested_command_is_the_first_fenced_block_else_the_whole_answer(answer, cell):
    assert command_of(answer) == cell


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        ("Run:\n```sh\nmake test\n```\nthen\n```\nmake\n```\n", "Run:\n```sh\nmake test\n```"),
        ("~~~bash\nfind . -name '*.py'\n~~~\n\nIt finds them.", "~~~bash\nfind . -name '*.py'\n~~~"),
        ("````sh\necho '```'\n``````\nafter", "````sh\necho '```'\n``````"),  # closed by a longer fence only
        ("Steps:\n\n- first\n\n  ```bash\n  make\n  ```\n", "Steps:\n\n- first\n\n  ```bash\n  make\n  ```"),
        ("> ```\n> uptime\n> ```\n", "> ```\n> uptime\n> ```"),  # inside a block quote
        ("```\n```\n", "```\n```"),  # an empty block closes too
        # not closed yet: no fence, the block still open, its closing line not ended, or a line that does not close
        ("ls -la\n", None),
        ("```bash\nls -la\n", None),
        ("```bash\nls -la\n```", None),  # the next token may still make it "```x", a line of the block
        ("```bash\nls\n``` x\n", None),
        ("````sh\necho\n```\n", None),
        ("    ls -la\n\n", None),  # an indented code block is not a fence
    ],
)
def test_an_answer_ends_with_the_closing_fence_of_its_first_block(answer, kept):
    end = first_block_end(answer)
    assert (answer[:end] if end is not None else None) == kept
    if kept is not None:
        assert command_of(kept) == command_of(answer), "the cut keeps the command the client takes"


def test_forget_deletes_the_named_blocks_and_every_answer_or_command_holding_the_text(conn):
    by_id = serve(conn, answer="Run `ls -la` there.")
    in_answer = serve(conn, answer="Token ghp_SECRET123 then:\n```bash\nls\n```")
    in_command = serve(conn, answer="```bash\nexport KEY=ghp_SECRET123\n```")
    kept = serve(conn, answer="Token GHP_secret123 is another case:\n```bash\nls\n```")
    with db.transaction(conn):
        assert suggestions.forget(conn, [by_id, "no-such-block"], "ghp_SECRET123", dry_run=True) == 3
    assert all(get_suggestion(conn, b) is not None for b in (by_id, in_answer, in_command, kept))
    with db.transaction(conn):
        assert suggestions.forget(conn, [by_id], "ghp_SECRET123") == 3
        assert suggestions.forget(conn, [], "") == 0  # no ids, no text: nothing
    assert [get_suggestion(conn, b) is None for b in (by_id, in_answer, in_command, kept)] == [True, True, True, False]
    assert totals(conn)["served"] == 4  # the counts hold no text and stay


@pytest.mark.parametrize(
    ("answer", "tokens", "end"),
    [
        ("It lists the files one per line", BLOCK_OPENS_WITHIN - 1, None),  # prose may still open a block
        ("It lists the files one per line", BLOCK_OPENS_WITHIN, len("It lists the files one per line")),
        ("It lists them:\n```bash\nls -l", BLOCK_OPENS_WITHIN + 40, None),  # a block opened in time goes on
        ("It lists them:\n``", BLOCK_OPENS_WITHIN, None),  # a fence still being written
        ("It lists them:\n> ~", BLOCK_OPENS_WITHIN, None),
        ("It lists them:\n```bash\nls -l\n```\nmore\n", 5, len("It lists them:\n```bash\nls -l\n```")),
        ("It lists them:\n```bash\nls -l\n```\nmore\n", 500, len("It lists them:\n```bash\nls -l\n```")),
    ],
)
def test_an_answer_that_opens_no_block_in_time_ends_where_it_stands(answer, tokens, end):
    assert answer_end(answer, tokens) == end
    if end is not None and first_block_end(answer) is None:
        assert command_of(answer[:end]) == command_of(answer), "what ended without a block gives the same command"
