"""The rules every assistant-session reader shares (Claude Code, Codex CLI, OpenTelemetry GenAI): a
session's records → blocks, one block per command. docs/inputs.md states them for people.

- **Intent.** The person's last turn is the intent of every command the assistant runs until the next turn;
  what the assistant said it would do since that turn (its plan) follows it. A block's context is those one
  or two markdown cells, so a turn that leads to several commands gives each its own block with the same
  intent. A command with no turn before it in the session gets no context (kept, never learned).
- **Suggested, then run.** The assistant's tool call is the block's generated cell (:func:`suggested`); its
  result, when it comes, the executed cell with the exit status (:func:`ran`): 0 for success, the command's
  code where the format gives one, else 1 for "failed".
- **Failed, then corrected.** A command that failed is remembered in its session; the next command of the
  same session that succeeds is the learned one, and each failure since the last success is kept as its
  rejected attempt (the event's ``rejected_attempts``, which the intake records and counts per format:
  :func:`learnerd.store.assistant_sessions.add_rejected_attempts`). The failed blocks stay
  blocks with their non-zero exit status, which the examples reconciler never learns.
- **Session.** Every block names its session (the assistant's own id of it). It is the assistant's, not a
  client's of learnerd: a command it runs never resolves an answer learnerd served, even one whose client claimed
  that id (:attr:`~learnerd.analyzer.reader.Reader.resolves_served`).
- **Denied.** A tool call the person refused (the assistant's permission prompt answered no) never ran:
  the block's suggestion status is ``rejected`` (:func:`denied`).

The state lives in :mod:`learnerd.store.assistant_sessions`, written in the reader's savepoint, so it
commits with the record's watermark.
"""

from __future__ import annotations

import sqlite3

from learnerd.store.assistant_sessions import Session, put_session
from learnerd.store.blocks import REJECTED, BlockEvent, Cell, get_block

SHELL_LANGUAGE = "bash"
"""The language of the code cells of assistants' shell commands (what the examples are tagged with)."""


def note_intent(conn: sqlite3.Connection, session: Session, text: str, when: float, now: float) -> None:
    """The person spoke: ``text`` is the intent of the session's next commands; the plan and the failures
    of the previous turn are forgotten."""
    session.intent, session.plan, session.intent_time, session.failed = text.strip(), "", when, []
    put_session(conn, session, now)


def note_plan(conn: sqlite3.Connection, session: Session, text: str, now: float) -> None:
    """The assistant said what it will do: the plan of the session's next commands (the latest wins)."""
    if text.strip():
        session.plan = text.strip()
        put_session(conn, session, now)


def context_of(session: Session) -> tuple[Cell, ...]:
    """A block's context in ``session``: the intent and the plan, as markdown cells (empty without an intent)."""
    if not session.intent:
        return ()
    cells = [Cell("markup", session.intent, "markdown")]
    if session.plan:
        cells.append(Cell("markup", session.plan, "markdown"))
    return tuple(cells)


def suggested(session: Session, block_id: str, source: str, command: str, when: float) -> BlockEvent:
    """The assistant's tool call ``command`` (a shell command line): the block's context and generated cell."""
    return BlockEvent(
        block_id,
        source,
        when,
        context=context_of(session),
        generated=Cell("code", command, SHELL_LANGUAGE),
        session=session.session_id or None,
    )


def ran(
    conn: sqlite3.Connection,
    session: Session,
    block_id: str,
    source: str,
    command: str,
    exit_code: int | None,
    when: float,
    now: float,
) -> BlockEvent:
    """The command of ``block_id`` ran with ``exit_code`` (None: unknown): its executed cell; a failure is
    remembered in the session, a success takes the failures before it as its rejected attempts (the
    event's ``rejected_attempts``)."""
    corrected: tuple[str, ...] = ()
    if exit_code not in (None, 0):
        if block_id not in session.failed:
            session.failed.append(block_id)
        put_session(conn, session, now)
    elif exit_code == 0 and session.failed:
        corrected = tuple(session.failed)
        session.failed = []
        put_session(conn, session, now)
    executed = Cell("code", command, SHELL_LANGUAGE)
    return BlockEvent(
        block_id,
        source,
        when,
        executed=executed,
        exit_code=exit_code,
        session=session.session_id or None,
        rejected_attempts=corrected,
    )


def denied(block_id: str, source: str, when: float) -> BlockEvent:
    """The person refused the tool call of ``block_id``: a rejected suggestion."""
    return BlockEvent(block_id, source, when, suggestion_status=REJECTED)


def suggested_command(conn: sqlite3.Connection, block_id: str) -> str | None:
    """The command the assistant suggested for ``block_id`` (its generated cell), or None when no tool call
    of a shell command made that block (a result of another tool)."""
    block = get_block(conn, block_id)
    if block is None or block.generated is None:
        return None
    return block.generated.text
