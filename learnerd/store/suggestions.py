"""What learnerd served, and what became of it: suggestions and their outcomes per adapter version.

Every answer learnerd gives to someone it trusts (the OpenAI-compatible endpoint's answers to a bearer of its
token, ``learnerd generate``) is recorded by :func:`record` in one transaction as

- a block of source :data:`SOURCE` (id ``served-<32 hex>``): its context the conversation's turns (user
  turns as markup cells, assistant turns as code cells; system turns are left out: they are the
  deployment's, not the person's intent), its generated cell the suggested command (:func:`command_of`),
  its ``session`` the client's session id; and
- a *suggestion* row: the document (``dlm_id``) and adapter version (``vNNNN``, or ``base``) that answered
  — the two halves of the answer's ``system_fingerprint`` ``<dlm_id>@vNNNN`` —, the full answer, the ids
  of the examples retrieved into its prompt, the session, and the command normalized for matching
  (:func:`normalize_command`).

Callers redact first (:mod:`learnerd.sources.served_answers`): nothing reaches these tables unscreened.

When a reader whose sessions learnerd's clients name (the block log:
:attr:`~learnerd.analyzer.reader.Reader.resolves_served`) later reports an execution (a block event with an
executed cell, merged by the analyzer's one intake), :func:`resolve` looks for the open suggestion it answers,
served at most ``window_s`` seconds before the execution's own time: the newest open suggestion of the
execution's session (the event's, else the one its block's earlier events of the same source named) served
before it; identical after whitespace normalization → ``accepted`` (``failed`` when the exit code is non-zero),
different → ``edited`` (the person ran something else in that session). Only the session joins: an execution
without one, or of another session, resolves nothing, even when it ran the very command an answer suggested — an
identical command is no evidence that the person asked that question (anyone may ask for a command that someone
will run), and the answer's prompt would become the runner's example.

The suggestion takes the outcome (once: the first execution that resolves it wins, and an execution
resolves at most one suggestion, so reading a line again changes nothing), the served block gains the
executed cell and its exit code (so a corrected or accepted answer becomes a learnable example of the
person's prompt), and :data:`suggestion_counts` adds one. An execution after the window leaves the
suggestion open; it is never resolved.

``suggestion_counts`` holds the totals per ``(document, version, outcome)`` — outcome :data:`SERVED` for
each answer recorded, then :data:`ACCEPTED`, :data:`EDITED` or :data:`FAILED` — updated in the transaction
that records or resolves, so they survive restarts and never go down: :func:`prune` removes suggestions
older than the retention (and the served blocks that never ran) but not their counts.

On PostgreSQL a suggestion is claimed with ``UPDATE … WHERE outcome IS NULL``, so two replicas reading
executions at once never resolve one suggestion twice.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from learnerd.store.blocks import BlockEvent, Cell, apply_event, get_block
from learnerd.store.db import Migration

SOURCE = "served"
"""The ``source`` of the blocks learnerd's own answers are recorded in."""

SERVED, ACCEPTED, EDITED, FAILED = "served", "accepted", "edited", "failed"
OUTCOMES = (SERVED, ACCEPTED, EDITED, FAILED)
"""The ``outcome`` label values of ``learnerd_suggestions_total``, in display order."""

MIGRATIONS = (
    Migration(
        "suggestions",
        1,
        """
        CREATE TABLE suggestions (
            block_id    TEXT PRIMARY KEY,
            document    TEXT NOT NULL,
            version     TEXT NOT NULL,
            session     TEXT,
            command     TEXT NOT NULL,
            answer      TEXT NOT NULL,
            retrieved   TEXT NOT NULL DEFAULT '[]',
            served_at   REAL NOT NULL,
            outcome     TEXT,
            resolved_by TEXT,
            resolved_at REAL
        );
        CREATE INDEX suggestions_session ON suggestions(session, served_at);
        CREATE INDEX suggestions_command ON suggestions(command, served_at);
        CREATE INDEX suggestions_served_at ON suggestions(served_at);
        CREATE INDEX suggestions_resolved_by ON suggestions(resolved_by);
        CREATE TABLE suggestion_counts (
            document TEXT NOT NULL,
            version  TEXT NOT NULL,
            outcome  TEXT NOT NULL,
            n        INTEGER NOT NULL,
            PRIMARY KEY (document, version, outcome)
        )
        """,
    ),
)


@dataclass(frozen=True)
class ServedAnswer:
    """One answer learnerd gave.

    ``document``: the ``dlm_id`` that answered (a base model's id for a base); ``version``: the adapter
    version (``vNNNN``) or ``"base"``; ``session``: the client's session id, None when it gave none;
    ``turns``: the conversation as ``(role, text)`` pairs, roles ``system``/``user``/``assistant``;
    ``answer``: the text generated; ``retrieved``: ids of the examples put into the prompt; ``served_at``:
    epoch seconds.
    """

    document: str
    version: str
    session: str | None
    turns: tuple[tuple[str, str], ...]
    answer: str
    retrieved: tuple[str, ...]
    served_at: float


@dataclass(frozen=True)
class Suggestion:
    """A suggestion row as stored (see the module docstring); ``outcome`` None while open."""

    block_id: str
    document: str
    version: str
    session: str | None
    command: str
    answer: str
    retrieved: list[str]
    served_at: float
    outcome: str | None
    resolved_by: str | None
    resolved_at: float | None


def command_of(answer: str) -> Cell:
    """The command an answer suggests, as a code cell: the body of its first fenced code block, else the
    whole answer, surrounding whitespace stripped; the fence's info string's first word is the language.

    The answer is parsed as CommonMark 0.31 (markdown-it-py): backtick or tilde fences, also inside a list
    or block quote, closed by a fence at least as long; a fence never closed runs to the end of the answer
    (section 4.5), as a model's answer does when it stops, or is cut at ``max_tokens``, before closing it.
    """
    fence = next((t for t in MarkdownIt("commonmark").parse(answer) if t.type == "fence"), None)
    if fence is None:
        return Cell("code", answer.strip())
    return Cell("code", fence.content.strip(), next(iter(fence.info.split()), ""))


def first_block_end(answer: str) -> int | None:
    """The length of ``answer`` up to the end of its first fenced code block's closing fence (the fence line
    itself, without its newline), or None while that block is not closed by a complete line (no fence yet,
    the block still open, or its closing line not yet ended by a newline): where an answer streamed token by
    token can end once it has given its command. The block is the one :func:`command_of` reads (CommonMark 0.31,
    markdown-it-py); a closing fence is a line of the opening fence's character, at least as long (section 4.5).
    """
    return _closed_at(answer, _first_fence(answer))


def _closed_at(answer: str, fence: Token | None) -> int | None:
    """:func:`first_block_end` of ``answer``, whose first fenced code block (:func:`_first_fence`) is ``fence``."""
    if fence is None or fence.map is None:
        return None
    lines = answer.split("\n")
    last = fence.map[1] - 1  # a closed block's last line is its closing fence
    if len(lines) <= fence.map[1] or last <= fence.map[0]:
        return None  # the line after the block has not begun: its last line may still grow
    closing = lines[last].lstrip(" >").rstrip()
    if len(closing) < len(fence.markup) or closing.strip(fence.markup[0]):
        return None
    return sum(len(line) + 1 for line in lines[: last + 1]) - 1


BLOCK_OPENS_WITHIN = 64
"""Generated tokens within which an answer that ends with its first fenced code block (:func:`answer_end`) opens one;
an answer that has not by then ends there. On ``benchmarks/bench_context_aware.py``'s 20 tasks (SmolLM2-135M-Instruct
answering under the nearest quoted example, 512 tokens allowed) every answer with a block opened it within its first
40 tokens; answers without one ran on to the 512 (82 s each through the endpoint on 2 cores, docs/benchmarks.md)."""


def answer_end(answer: str, tokens: int) -> int | None:
    """Where an answer that ends with its first fenced code block ends, ``answer`` being the text of its first
    ``tokens`` generated tokens: after that block's closing fence (:func:`first_block_end`), or at its end once
    ``tokens`` reached :data:`BLOCK_OPENS_WITHIN` with no fence opened (none in the text, and its last line does not
    begin one: a line starting with a backtick or a tilde may be a fence still being written); None: not yet.
    Parses ``answer`` once (it is called at every generated token)."""
    fence = _first_fence(answer)
    if fence is not None or tokens < BLOCK_OPENS_WITHIN:
        return _closed_at(answer, fence)
    last = answer.rsplit("\n", 1)[-1].lstrip(" >")
    return None if last[:1] in ("`", "~") else len(answer)


def _first_fence(answer: str) -> Token | None:
    """The first fenced code block of ``answer`` (a markdown-it-py ``fence`` token; an unclosed block runs to the
    end), None when it has none."""
    return next((t for t in MarkdownIt("commonmark").parse(answer) if t.type == "fence"), None)


def normalize_command(text: str) -> str:
    """``text`` with every run of whitespace made one space and the ends stripped: two commands are the
    same suggestion when these are equal."""
    return " ".join(text.split())


def _prompt_cells(turns: Sequence[tuple[str, str]]) -> tuple[Cell, ...]:
    kinds = {"user": "markup", "assistant": "code"}
    return tuple(Cell(kinds[role], text) for role, text in turns if role in kinds)


def record(conn: sqlite3.Connection, answer: ServedAnswer, now: float) -> str:
    """Record ``answer`` (already redacted) as a served block and an open suggestion, and count it
    :data:`SERVED`; returns the block's id. One transaction: call it inside
    :func:`learnerd.store.db.transaction`.

    Raises:
        sqlite3.Error, psycopg.Error: the database failed (nothing of the answer is written).
    """
    block_id = f"served-{uuid.uuid4().hex}"
    generated = command_of(answer.answer)
    event = BlockEvent(
        block_id,
        SOURCE,
        answer.served_at,
        context=_prompt_cells(answer.turns),
        generated=generated,
        session=answer.session,
    )
    apply_event(conn, event, now)
    conn.execute(
        "INSERT INTO suggestions (block_id, document, version, session, command, answer, retrieved, served_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            block_id,
            answer.document,
            answer.version,
            answer.session,
            normalize_command(generated.text),
            answer.answer,
            json.dumps(list(answer.retrieved)),
            answer.served_at,
        ),
    )
    _count(conn, answer.document, answer.version, SERVED)
    return block_id


def _count(conn: sqlite3.Connection, document: str, version: str, outcome: str) -> None:
    conn.execute(
        "INSERT INTO suggestion_counts (document, version, outcome, n) VALUES (?, ?, ?, 1)"
        " ON CONFLICT (document, version, outcome) DO UPDATE SET n = suggestion_counts.n + 1",
        (document, version, outcome),
    )


def resolve(conn: sqlite3.Connection, ev: BlockEvent, now: float, window_s: float) -> str | None:
    """Resolve the open suggestion the execution ``ev`` answers (the rules are in the module docstring);
    returns the served block's id when one was resolved (its row changed), else None. Call it inside the
    transaction that merged ``ev`` into its block.

    ``window_s``: seconds after serving within which an execution still answers a suggestion.
    """
    if ev.executed is None or ev.source == SOURCE:
        return None
    session = ev.session
    if session is None:
        stored = get_block(conn, ev.block_id)  # a session named by the same source (not another reader's)
        session = stored.session if stored is not None and stored.source == ev.source else None
    if not session:
        return None
    row = conn.execute(
        "SELECT * FROM suggestions WHERE outcome IS NULL AND session = ? AND served_at >= ? AND served_at <= ?"
        " ORDER BY served_at DESC LIMIT 1",
        (session, ev.time - window_s, ev.time),
    ).fetchone()
    if row is None:
        return None
    if conn.execute("SELECT 1 FROM suggestions WHERE resolved_by = ?", (ev.block_id,)).fetchone() is not None:
        return None  # this execution (its block) already resolved one
    ran_ok = ev.exit_code in (None, 0)
    outcome = EDITED if row["command"] != normalize_command(ev.executed.text) else ACCEPTED if ran_ok else FAILED
    claimed = conn.execute(
        "UPDATE suggestions SET outcome = ?, resolved_by = ?, resolved_at = ? WHERE block_id = ? AND outcome IS NULL",
        (outcome, ev.block_id, ev.time, row["block_id"]),
    )
    if claimed.rowcount != 1:
        return None  # another replica resolved it first
    _count(conn, row["document"], row["version"], outcome)
    apply_event(conn, BlockEvent(row["block_id"], SOURCE, ev.time, executed=ev.executed, exit_code=ev.exit_code), now)
    return row["block_id"]


def get_suggestion(conn: sqlite3.Connection, block_id: str) -> Suggestion | None:
    """The suggestion recorded with the served block ``block_id``, or None."""
    row = conn.execute("SELECT * FROM suggestions WHERE block_id = ?", (block_id,)).fetchone()
    if row is None:
        return None
    return Suggestion(**{**dict(row), "retrieved": json.loads(row["retrieved"])})


def counts(conn: sqlite3.Connection, document: str | None = None) -> dict[str, dict[str, dict[str, int]]]:
    """Totals since the store was created: document → version → outcome → count, every outcome of
    :data:`OUTCOMES` present (0 when none); only ``document``'s when given."""
    if document is None:
        rows = conn.execute("SELECT document, version, outcome, n FROM suggestion_counts ORDER BY document, version")
    else:
        rows = conn.execute(
            "SELECT document, version, outcome, n FROM suggestion_counts WHERE document = ? ORDER BY version",
            (document,),
        )
    out: dict[str, dict[str, dict[str, int]]] = {}
    for doc, version, outcome, n in rows:
        out.setdefault(doc, {}).setdefault(version, dict.fromkeys(OUTCOMES, 0))[outcome] = n
    return out


def prune(conn: sqlite3.Connection, before: float) -> int:
    """Delete the suggestions served before ``before`` (epoch seconds), with their served blocks that never
    ran (a block that gained an executed cell is kept: it is a learned block like any reader's); returns
    how many suggestions were deleted. The counts are kept. Call it inside a transaction.
    """
    conn.execute(
        "DELETE FROM blocks WHERE source = ? AND executed IS NULL"
        " AND id IN (SELECT block_id FROM suggestions WHERE served_at < ?)",
        (SOURCE, before),
    )
    return conn.execute("DELETE FROM suggestions WHERE served_at < ?", (before,)).rowcount


def forget(
    conn: sqlite3.Connection, block_ids: Sequence[str], text: str | None = None, *, dry_run: bool = False
) -> int:
    """Delete the suggestions of the served blocks ``block_ids`` and, with ``text``, every suggestion whose
    answer or command contains it (case-sensitive, as ``learnerd forget --match``); returns how many went
    (with ``dry_run``: how many would, nothing deleted). The counts are kept (they hold no text). Call it
    inside a transaction. The ids are looked up by primary key; only a ``text`` reads every row (a substring
    match no index serves); an empty ``text`` matches nothing."""
    doomed = {
        block_id
        for block_id in dict.fromkeys(block_ids)
        if conn.execute("SELECT 1 FROM suggestions WHERE block_id = ?", (block_id,)).fetchone() is not None
    }
    if text:
        rows = conn.execute("SELECT block_id, command, answer FROM suggestions").fetchall()
        doomed.update(r[0] for r in rows if text in r[1] or text in r[2])
    if not dry_run:
        for block_id in doomed:
            conn.execute("DELETE FROM suggestions WHERE block_id = ?", (block_id,))
    return len(doomed)
