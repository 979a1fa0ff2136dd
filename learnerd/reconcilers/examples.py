"""The examples reconciler: block → (query, answer) example, foyle's learner made level-triggered.

``reconcile(block_id)`` reads the block as it is now and makes the example with the same id match
it: written when the block is learnable and the stored example differs, deleted when the block is
no longer learnable, untouched otherwise (an unchanged block writes nothing). A block is learnable
when it has an executed code cell that is not blank nor longer than ``[examples] max_answer_chars`` (a
command that long teaches nothing, and its probe section must fit a document), did not fail (exit code 0,
or none reported — foyle's EXECUTE events carry none), was not run in eval mode, and has markdown context
right before it (cut to ``max_query_chars``); with ``learn_only_corrections`` (foyle's original rule) the
executed cell must also differ from the generated one. A block a tombstone covers
(:mod:`learnerd.store.tombstones`, written by ``learnerd forget``) is never learnable: its example is deleted
and never written again.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from learnerd.privacy.policy import CommandPolicy, category
from learnerd.reconcilers.settings import ExamplesConfig
from learnerd.reconcilers.spec import BLOCKS, EXAMPLES, ControllerSpec, ExampleChange, Watch, Wiring
from learnerd.runtime.reconcile import Result
from learnerd.store import db
from learnerd.store.blocks import Block, get_block, list_block_ids
from learnerd.store.dlm.qa import question_text
from learnerd.store.examples import Example, delete_example, get_example, put_example
from learnerd.store.tombstones import load_tombstones

log = structlog.get_logger(__name__)

ExampleChanged = Callable[[str, Example | None, Example | None], None]
"""Called after a commit that changed an example: ``(example_id, old, new)``; either may be None."""


@dataclass(frozen=True)
class Verdict:
    """Whether a block is learnable; ``reason`` says why not (for logs); ``refused``: by the privacy policy
    (a dangerous command, an injection), counted apart from the ordinary reasons."""

    example: Example | None
    reason: str = ""
    refused: bool = False


def query_of(block: Block, max_chars: int) -> str:
    """The markdown cells immediately before the block (up to the nearest code cell), joined by one line
    break, without blank lines (:func:`~learnerd.store.dlm.qa.question_text`: the released dlm ends a
    question at its first blank line); when longer than ``max_chars`` characters, the last ``max_chars``
    are kept — the text nearest the cell matters most."""
    run: list[str] = []
    for cell in reversed(block.context):
        if cell.kind != "markup":
            break
        if cell.text.strip():
            run.append(cell.text)
    query = question_text("\n".join(reversed(run)))
    return question_text(query[-max_chars:]) if len(query) > max_chars else query


def judge(block: Block, cfg: ExamplesConfig, policy: CommandPolicy | None = None) -> Verdict:
    """The example ``block`` should give, or None with the reason it is not learnable; ``policy``
    (:class:`~learnerd.privacy.policy.CommandPolicy`) refuses destructive commands, and an intent or a command
    that reads as instructions to the model."""
    executed = block.executed
    if executed is None:
        return Verdict(None, "not executed")
    answer = executed.text.strip()
    if not answer:
        return Verdict(None, "executed cell is blank")
    if len(answer) > cfg.max_answer_chars:
        return Verdict(None, f"executed cell of {len(answer):,} characters, over max_answer_chars")
    if block.exit_code not in (None, 0):
        return Verdict(None, f"execution failed with exit code {block.exit_code}")
    if block.eval_mode:
        return Verdict(None, "eval mode")
    if cfg.learn_only_corrections and block.generated is not None and block.generated.text.strip() == answer:
        return Verdict(None, "executed cell equals the generated one (learn_only_corrections)")
    query = query_of(block, cfg.max_query_chars)
    if not query:
        return Verdict(None, "no markdown context before the cell")
    refusal = policy.refusal(query, answer) if policy is not None else None
    if refusal:
        return Verdict(None, f"refused by policy: {refusal}", refused=True)
    return Verdict(Example(id=block.id, query=query, answer=answer, language=executed.language))


class ExamplesReconciler:
    """Level-triggered block → example reconciler (key: block id = example id).

    ``changes`` counts what it did: ``written`` and ``deleted`` examples (logged at info with the example's id
    and the log file and line its executed cell was read from; its text only at debug level); ``refusals`` the
    blocks the privacy policy refused (by the reason's category), since start (a resync counts each refused block
    again).
    """

    name = "examples"  # SPEC.name

    def __init__(
        self,
        conn: sqlite3.Connection,
        cfg: ExamplesConfig,
        on_change: ExampleChanged,
        clock: Callable[[], float] = time.time,
        policy: CommandPolicy | None = None,
    ) -> None:
        self._conn = conn
        self._cfg = cfg
        self._policy = policy
        self.refusals: Counter[str] = Counter()
        self._on_change = on_change
        self._clock = clock
        self.changes: Counter[str] = Counter()

    def resync_keys(self) -> list[str]:
        """Every block id (example id = block id), oldest first."""
        return list_block_ids(self._conn)

    async def reconcile(self, key: str) -> Result:
        block = get_block(self._conn, key)
        verdict = judge(block, self._cfg, self._policy) if block is not None else Verdict(None, "block not found")
        texts = (verdict.example.query, verdict.example.answer) if verdict.example is not None else ()
        stone = load_tombstones(self._conn).covering(key, texts)
        if stone is not None:
            verdict = Verdict(None, f"forgotten (tombstone {stone.id}: {stone.kind})")
        if verdict.refused:
            self.refusals[category(verdict.reason)] += 1
            log.info("block refused", reason=verdict.reason)
        current = get_example(self._conn, key)
        desired = verdict.example
        if desired is None:
            if current is None:
                log.debug("block not learnable", reason=verdict.reason)
                return Result()
            with db.transaction(self._conn):
                delete_example(self._conn, key)
            self.changes["deleted"] += 1
            log.info("example deleted", example_id=key, reason=verdict.reason)
        elif desired.same_content(current):
            return Result()
        else:
            desired = Example(desired.id, desired.query, desired.answer, desired.language, self._clock())
            with db.transaction(self._conn):
                put_example(self._conn, desired)
            self.changes["written"] += 1
            assert block is not None  # a desired example comes from a block
            origin = block.executed_origin
            log.info(
                "example written",
                example_id=key,
                new=current is None,
                reader=block.source,
                file=origin.path if origin is not None else None,
                line=origin.line if origin is not None else None,
            )
            log.debug("example text", example_id=key, query=desired.query, answer=desired.answer)
        self._on_change(key, current, desired)
        return Result()


def _build(wiring: Wiring) -> ExamplesReconciler:
    def changed(key: str, old: Example | None, new: Example | None) -> None:
        wiring.notify(EXAMPLES, ExampleChange(key, old, new))

    return ExamplesReconciler(
        wiring.conn, wiring.cfg.examples, changed, clock=wiring.clock, policy=CommandPolicy(wiring.cfg.privacy)
    )


#: Blocks → examples: fed by every block the analyzer ingests (block id = example id); its changes feed
#: every spec watching :data:`~learnerd.reconcilers.spec.EXAMPLES`.
SPEC = ControllerSpec(
    ExamplesReconciler.name,
    _build,
    defaults={"workers": 2},
    key_kind="block id",
    watches=(Watch(BLOCKS, lambda w, block_id: [block_id]),),
)
