"""``learnerd why "TEXT"`` / ``learnerd why --answer FINGERPRINT``: where what learnerd knows came from.

For a text: the nearest learned examples (the retrieval of ``learnerd search``: through the running daemon when
one runs on the state directory, else in this process), the block each came from (the log file, line and time
its command was read from, the reader that parsed it and, for an assistant's session log, the session) and the
adapter versions that trained on it (from each version's ``manifest.json``). ``--answer`` takes a served
response's ``system_fingerprint`` (``<dlm_id>@vNNNN``): with a text, each example also says whether that version
trained on it; alone, it lists every learned example that version trained on. ``--json`` prints one JSON object.

Exit status: 0; 1 for an unknown fingerprint or version, no database, or an unreachable store.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError, add_common_options, add_wait_option, load_config_from_args, plain

if TYPE_CHECKING:
    from learnerd.daemon.config import Config
    from learnerd.store.retrieval import SearchHit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "why", help="where learned examples came from, and which adapter versions trained on them",
        description=plain(__doc__),
    )  # fmt: skip
    p.add_argument("text", nargs="?", help="the text to find the nearest learned examples for")
    p.add_argument("--answer", metavar="FINGERPRINT", help="a served response's system_fingerprint (<dlm_id>@vNNNN)")
    p.add_argument("-k", type=int, default=3, help="how many examples for TEXT (default: 3)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_wait_option(p)
    add_common_options(p)
    p.set_defaults(func=run)


def parse_fingerprint(fingerprint: str) -> tuple[str, str]:
    """``<dlm_id>@vNNNN`` → ``(dlm_id, "vNNNN")``.

    Raises:
        CommandError: not that form, or the base model answered (``…@base``, ``base``): nothing learned.
    """
    doc_key, sep, version = fingerprint.strip().rpartition("@")
    if fingerprint.strip() == "base" or (sep and version == "base"):
        raise CommandError(f"--answer {fingerprint}: the base model answered, without an adapter: nothing learned")
    if not sep or not doc_key or not version.startswith("v"):
        raise CommandError(f"--answer {fingerprint!r}: expected a system_fingerprint <dlm_id>@vNNNN", exit_code=2)
    return doc_key, version


def run(args: argparse.Namespace) -> int:
    if args.text is None and args.answer is None:
        raise CommandError("give a TEXT, --answer FINGERPRINT, or both", exit_code=2)
    if args.k < 1:
        raise CommandError("-k must be at least 1", exit_code=2)
    from learnerd.cmd._common import open_store
    from learnerd.eval.history import current_versions
    from learnerd.fleet.ledger import adapter_store
    from learnerd.store import db
    from learnerd.store.adapters import AdapterStoreError

    cfg = load_config_from_args(args)
    answering = parse_fingerprint(args.answer) if args.answer is not None else None
    if not cfg.layout.is_postgres and not cfg.layout.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.layout.db_path}: run `learnerd run` first")
    if not cfg.layout.is_postgres and (pending := db.status(cfg.layout.db_path).pending):
        raise CommandError(
            f"{cfg.layout.db_path}: not migrated (lacks {db.label([m.key for m in pending])}):"
            " run learnerd db migrate (or start learnerd run) first"
        )
    hits = _nearest(cfg, args) if args.text is not None else None
    try:
        store = adapter_store(cfg)
        documents = {v.doc_key: str(path) for path, v in current_versions(store, cfg.layout.docs_roots).items()}
        conn = open_store(cfg, readonly=True)
        try:
            answer = _why(conn, store, documents, hits, answering)
        finally:
            conn.close()
    except AdapterStoreError as exc:
        raise CommandError(f"--answer {args.answer}: {exc}") from None
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from None
    answer = {"text": args.text, **answer}
    if args.json:
        json.dump(answer, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        _print(answer)
    return 0


def _nearest(cfg: Config, args: argparse.Namespace) -> list[SearchHit]:
    """``learnerd search``'s results for the text: from the running daemon, else searched in this process."""
    from learnerd.cmd._client import DaemonNotRunning, client_for
    from learnerd.cmd.search import search_daemon, search_offline

    try:
        return search_daemon(client_for(cfg), args.text, args.k, args.wait)
    except DaemonNotRunning:
        print(
            f"learnerd why: no daemon on {cfg.state_dir}; searching offline "
            "(loading the embedder in this process takes a while)",
            file=sys.stderr,
        )
        return search_offline(cfg, args.text, args.k)


def _why(
    conn: Any,
    store: Any,
    documents: dict[str, str],
    hits: Sequence[Mapping[str, Any]] | None,
    answering: tuple[str, str] | None,
) -> dict[str, Any]:
    """The answer as plain data (see the module docstring)."""
    from dataclasses import asdict

    from learnerd.eval.versions import manifest_of, versions_training
    from learnerd.store.examples import get_examples
    from learnerd.store.manifest import learned_origin

    answered_by: dict[str, Any] | None = None
    trained: set[str] = set()
    if answering is not None:
        doc_key, ref = answering
        version = store.resolve(doc_key, ref)
        manifest = manifest_of(version)
        trained = manifest.example_ids() if manifest is not None else set()
        answered_by = {
            "doc_key": doc_key,
            "document": documents.get(doc_key),
            "version": version.name,
            "has_manifest": manifest is not None,
            "examples_trained": len(trained),
        }
    if hits is None:  # --answer alone: every example that version trained on
        stored = get_examples(conn, sorted(trained))
        hits = [
            {"id": i, "score": None, "query": e.query if e else None, "answer": e.answer if e else None}
            for i in sorted(trained)
            for e in [stored.get(i)]
        ]
    ids = {h["id"] for h in hits}
    by_doc = {key: versions_training(store, key, ids) for key in store.doc_keys()}
    examples = []
    for hit in hits:
        origin = asdict(learned_origin(conn, hit["id"]))
        trained_by = [
            {"doc_key": key, "document": documents.get(key), "versions": per_id[hit["id"]]}
            for key, per_id in by_doc.items()
            if per_id[hit["id"]]
        ]
        examples.append(
            {
                "id": hit["id"],
                "score": hit["score"],
                "query": hit["query"],
                "answer": hit["answer"],
                "block": {k: origin[k] for k in ("block_id", "file", "line", "time", "reader", "session")},
                "trained_by": trained_by,
                "in_answering_version": (hit["id"] in trained) if answering is not None else None,
            }
        )
    return {"answered_by": answered_by, "examples": examples}


def _print(answer: dict[str, Any]) -> None:
    by = answer["answered_by"]
    if by is not None:
        where = by["document"] or by["doc_key"]
        note = "" if by["has_manifest"] else " (no manifest: committed before learnerd wrote manifests)"
        print(f"answered by {where} {by['version']}, trained on {by['examples_trained']} learned example(s){note}")
    if not answer["examples"]:
        print("no learned example found")
    for n, e in enumerate(answer["examples"], 1):
        score = f" (similarity {e['score']:.3f})" if e["score"] is not None else ""
        print(f"{n}. example {e['id']}{score}")
        if e["query"] is not None:
            print(f"   context:  {_one_line(e['query'])}")
            print(f"   executed: {_one_line(e['answer'])}")
        else:
            print("   (no longer stored)")
        b = e["block"]
        place = f"{b['file']}:{b['line']}" if b["file"] else "(no log line recorded)"
        when = (
            dt.datetime.fromtimestamp(b["time"], dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            if b["time"] is not None
            else "time unknown"
        )
        read = (f" · read as {b['reader']}" if b["reader"] else "") + (
            f" · session {b['session']}" if b["session"] else ""
        )
        print(f"   block {b['block_id']}: {place} · {when}{read}")
        for t in e["trained_by"]:
            print(f"   trained into {t['document'] or t['doc_key']}: {', '.join(t['versions'])}")
        if not e["trained_by"]:
            print("   trained into no adapter version yet")
        if e["in_answering_version"] is not None:
            print(f"   in the answering version: {'yes' if e['in_answering_version'] else 'no'}")


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
