"""Few-shot retrieval lists each answer once: two pages that teach one command give one hit, at its best
score, and ``k`` distinct answers still come back (real MiniLM, real SQLite, real faiss index)."""

from __future__ import annotations

from pathlib import Path

from learnerd.store import db
from learnerd.store.examples import Example, put_example
from learnerd.store.retrieval import describe_hits, nearest
from learnerd.store.vector_index import VectorIndex

EXAMPLES = [
    Example("tldr:ls:0", "List the files in the current directory", "ls -la"),
    Example("tldr:ls:1", "Show every file here, hidden ones too", "ls  -la"),  # the same command, other spacing
    Example("tldr:du:0", "Show how much disk space this folder uses", "du -sh ."),
    Example("tldr:pwd:0", "Print the current working directory", "pwd"),
]


def test_an_answer_is_retrieved_once_and_k_distinct_answers_remain(tmp_path: Path, minilm) -> None:
    conn = db.connect(tmp_path / "learnerd.db")
    try:
        with db.transaction(conn):
            for example in EXAMPLES:
                put_example(conn, example)
        index = VectorIndex(minilm.dim)
        index.upsert([e.id for e in EXAMPLES], minilm.embed([e.query for e in EXAMPLES]))
        text = "list all files in this directory"
        candidates = nearest(minilm, index, text, 2)
        assert {c[0] for c in candidates[:2]} == {"tldr:ls:0", "tldr:ls:1"}, "both ls pages are the nearest"

        hits = describe_hits(conn, candidates, 2)
        assert len(hits) == 2
        assert [" ".join(h["answer"].split()) for h in hits].count("ls -la") == 1
        assert hits[0]["id"] == candidates[0][0], "the duplicate kept is the best-scored one"
        assert hits[1]["answer"] in ("du -sh .", "pwd")
    finally:
        conn.close()
