"""``learnerd generate DOC "prompt"``: one greedy answer from a document's model (its current adapter by
default), optionally steered by a steering file (``--steering PATH``, e.g. ``learnerd evolve``'s
``deltas_best.json``). Prints the answer on stdout (``--json``: an object with the answer, its length in
tokens, the base model and the adapter version).

The answer is remembered like the endpoint's (docs/operations.md, "Suggestions"): redacted, recorded in the
store as a suggestion of the adapter version that gave it, in the session ``--session S`` names, so that
running it later counts as accepted, edited or failed for that version.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args, plain
from learnerd.cmd._generation import add_generation_options, load_document_model, load_steering_processor, read_dlm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="a greedy answer from a document's model (adapter, optional steering)",
        description=plain(__doc__),
    )
    p.add_argument("doc", metavar="DOC", type=Path, help="the .dlm document (base model, adapter, system prompt)")
    p.add_argument("prompt", help="the user turn to answer")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="longest answer (default: 128)")
    p.add_argument("--json", action="store_true", help="print the answer, its token count and the model as JSON")
    p.add_argument("--session", metavar="S", help="the session the answer is for (joins the command run later)")
    add_generation_options(p)
    add_common_options(p)
    p.set_defaults(func=run, log_level="warning")


def run(args: argparse.Namespace) -> int:
    from learnerd.ml.generate import greedy_reply
    from learnerd.ml.rows import RowEncodingError

    if args.max_new_tokens < 1:
        raise CommandError("--max-new-tokens must be at least 1", exit_code=2)
    cfg = load_config_from_args(args)
    if not cfg.layout.root.exists():  # a first use converts a base into it: create it 0700 first, as every command
        from learnerd.store.state_dir import secure_state_dir

        secure_state_dir(cfg.layout.root)
    loaded = load_document_model(cfg, read_dlm(args.doc), args.adapter, args.doc_key, args.device)
    processors = None
    if args.steering is not None:
        from transformers import LogitsProcessorList

        processors = LogitsProcessorList([load_steering_processor(args.steering, loaded.tokenizer)])
    try:
        reply = greedy_reply(
            loaded.model,
            loaded.tokenizer,
            args.prompt,
            system=loaded.document.frontmatter.system_prompt,
            max_new_tokens=args.max_new_tokens,
            logits_processor=processors,
        )
    except RowEncodingError as exc:
        raise CommandError(f"{args.doc}: {exc}") from None
    if args.json:
        import json

        steering = str(args.steering) if args.steering is not None else None
        answer = {"text": reply.text, "tokens": len(reply.token_ids), **loaded.describe(), "steering": steering}
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        print(reply.text)
    _remember(cfg, loaded, args, reply.text)
    return 0


def _remember(cfg, loaded, args: argparse.Namespace, text: str) -> None:
    """Record the answer as a suggestion (:func:`learnerd.sources.served_answers.record_answer`); a store that
    fails is a warning on stderr, not a failed command: the answer was given."""
    import sys
    import time

    from learnerd.analyzer.ingest import STORE_ERRORS
    from learnerd.cmd._common import open_store
    from learnerd.privacy.redact import Redactor
    from learnerd.sources.served_answers import record_answer
    from learnerd.store.state_dir import UnsafeStateDir, secure_state_dir
    from learnerd.store.suggestions import ServedAnswer

    now = time.time()
    answer = ServedAnswer(
        document=loaded.doc_key,
        version=loaded.adapter.name if loaded.adapter is not None else "base",
        session=args.session or None,
        turns=(("user", args.prompt),),
        answer=text,
        retrieved=(),
        served_at=now,
    )
    try:
        secure_state_dir(cfg.layout.root)
        conn = open_store(cfg)
        try:
            record_answer(conn, answer, Redactor(cfg.privacy), now)
        finally:
            conn.close()
    except (CommandError, UnsafeStateDir, *STORE_ERRORS) as exc:
        print(f"warning: the answer is not remembered: {exc}", file=sys.stderr)
