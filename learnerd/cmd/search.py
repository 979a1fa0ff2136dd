"""``learnerd search "text" -k 3``: the retrieval read path — the top-k learned examples for a text.

When a daemon runs on the state directory, it answers (``POST /search`` on the admin socket: its
embedder and index are warm, no model or index load); a daemon still starting (its embedder loading)
is waited for, at most ``--wait`` seconds. Otherwise this process loads the embedder and the stored
vectors (MiniLM: about 20 s on 2 cores). Which path is taken is said on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from learnerd.cmd._common import CommandError, add_common_options, add_wait_option, load_config_from_args, plain

if TYPE_CHECKING:
    from learnerd.daemon.config import Config
    from learnerd.store.retrieval import SearchHit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", help="top-k learned examples for a text (few-shot retrieval)", description=plain(__doc__)
    )
    p.add_argument("text", help="the context to find examples for")
    p.add_argument("-k", type=int, default=3, help="how many examples (default: 3)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_wait_option(p)
    add_common_options(p)
    p.set_defaults(func=run)


def search_offline(cfg: Config, text: str, k: int) -> list[SearchHit]:
    """Load the embedder and the stored vectors, embed ``text``, return the top-``k`` examples.

    Each result is ``{"id", "score", "query", "answer", "language"}``; ``score`` is the cosine
    similarity of ``text`` with the example's query.
    """
    from learnerd.cmd._common import open_store
    from learnerd.ml.embedders import make_embedder
    from learnerd.store.embeddings import load_index
    from learnerd.store.retrieval import describe_hits, nearest

    if not cfg.layout.is_postgres and not cfg.layout.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.layout.db_path}: run `learnerd run` first")
    conn = open_store(cfg, readonly=True)
    try:
        embedder = make_embedder(cfg.embeddings)
        index = load_index(conn, embedder.name, embedder.dim or None)
        return describe_hits(conn, nearest(embedder, index, text, k), k)
    finally:
        conn.close()


def print_results(results: list[SearchHit], as_json: bool) -> None:
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


def search_daemon(client, text: str, k: int, wait_s: float, poll_s: float = 0.5) -> list[SearchHit]:
    """``POST /search`` on the running daemon; while it answers 503 (starting), retry for ``wait_s`` seconds.

    Raises:
        DaemonStarting: still starting after ``wait_s``. DaemonNotRunning: it went away.
    """
    import time

    from learnerd.cmd._client import DaemonStarting

    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return client.call("POST", "/search", {"text": text, "k": k})
        except DaemonStarting:
            if time.monotonic() >= deadline:
                raise
            if not said:
                print(f"learnerd search: the daemon is starting; waiting up to {wait_s:g} s", file=sys.stderr)
                said = True
            time.sleep(poll_s)


def run(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise CommandError("-k must be at least 1", exit_code=2)
    from learnerd.cmd._client import DaemonNotRunning, client_for

    cfg = load_config_from_args(args)
    client = client_for(cfg)
    try:
        results = search_daemon(client, args.text, args.k, args.wait)
    except DaemonNotRunning:
        print(
            f"learnerd search: no daemon on {cfg.state_dir}; searching offline "
            "(loading the embedder in this process takes a while)",
            file=sys.stderr,
        )
        results = search_offline(cfg, args.text, args.k)
    print_results(results, args.json)
    return 0
