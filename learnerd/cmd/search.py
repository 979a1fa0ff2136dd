"""``learnerd search "text" -k 3``: the retrieval read path — the top-k learned examples for a text."""

from __future__ import annotations

import argparse
import json
import sys

from learnerd.cmd._common import CommandError, add_common_options, load_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="top-k learned examples for a text (few-shot retrieval)")
    p.add_argument("text", help="the context to find examples for")
    p.add_argument("-k", type=int, default=3, help="how many examples (default: 3)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_common_options(p)
    p.set_defaults(func=run)


def search_offline(cfg, text: str, k: int) -> list[dict]:
    """Load the embedder and the stored vectors, embed ``text``, return the top-``k`` examples.

    Each result is ``{"id", "score", "query", "answer", "language"}``; ``score`` is the cosine
    similarity of ``text`` with the example's query.
    """
    from learnerd.ml.embedders import make_embedder
    from learnerd.store import db
    from learnerd.store.embeddings import load_index
    from learnerd.store.examples import get_examples

    if not cfg.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.db_path}: run `learnerd run` first")
    conn = db.connect(cfg.db_path, readonly=True)
    try:
        embedder = make_embedder(cfg.embeddings)
        index = load_index(conn, embedder.name, embedder.dim or None)
        hits = index.search(embedder.embed([text])[0], k)
        examples = get_examples(conn, [i for i, _ in hits])
    finally:
        conn.close()
    return [
        {
            "id": i,
            "score": round(s, 4),
            "query": examples[i].query,
            "answer": examples[i].answer,
            "language": examples[i].language,
        }
        for i, s in hits
        if i in examples
    ]


def print_results(results: list[dict], as_json: bool) -> None:
    if as_json:
        json.dump(results, sys.stdout, ensure_ascii=False, indent=2)
        print()
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(results)} example(s)", show_lines=True)
    table.add_column("score", justify="right")
    table.add_column("query (context)")
    table.add_column("answer (executed cell)", style="bold")
    for r in results:
        table.add_row(f"{r['score']:.3f}", r["query"], r["answer"])
    Console().print(table)


def run(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise CommandError("-k must be at least 1", exit_code=2)
    cfg = load_config_from_args(args)
    results = search_offline(cfg, args.text, args.k)
    print_results(results, args.json)
    return 0
