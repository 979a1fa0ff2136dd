"""Routing's cost per request beside retrieval's, measured in one run.

Issue 59's target: routing costs <= 5 ms per request at p50 beyond retrieval, reusing the request's embedding.

The endpoint embeds a document request's last user message once (``learnerd.api.openai_app``): retrieval searches
the VectorIndex with that embedding, routing compares it with the served version's questions
(:meth:`learnerd.ml.router.Router.route`: one ``(questions, 384) @ (384,)`` product and a max). Per request,
interleaved so all three see the same machine load, this times

1. **retrieval** (the baseline): the embedding (MiniLM, one torch thread, as the daemon's search) and the faiss
   search of ``--examples`` indexed vectors for k = 3 (``nearest_to``: what ``rag_k`` 3 costs);
2. **routing beyond retrieval**: :meth:`~learnerd.ml.router.Router.route` on that embedding, over a document of
   ``--questions`` learned questions;
3. **routing alone** (``rag_k`` 0, the default): the embedding and the route.

The document's questions are the first description of ``--questions`` nl2bash commands
(``../shared/peer-data/nl2bash/paraphrases.jsonl``); the requests are the other descriptions of those commands
and of others (half near the document, half not); the index holds the embeddings of the requests' neighbours
padded with seeded random unit vectors up to ``--examples`` (faiss's exact search costs the same whatever the
vectors hold, as ``bench_search.py`` pads). Prints p50 and p95 of each (ms) and the ratios routing ÷ retrieval.
Usage::

    python benchmarks/bench_routing.py [--examples 10000] [--questions 100] [--requests 400]

Exits 2 without the nl2bash file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.tldr_to_blocklog import PEER_TLDR  # noqa: E402
from learnerd.ml.embedders import MiniLMEmbedder  # noqa: E402
from learnerd.ml.router import Router, calibrate  # noqa: E402
from learnerd.ml.threads import intra_op_threads  # noqa: E402
from learnerd.store.retrieval import nearest_to  # noqa: E402
from learnerd.store.vector_index import VectorIndex  # noqa: E402
from learnerd.training.ingredients.replay import replay_prompts  # noqa: E402

NL2BASH = PEER_TLDR.parent / "nl2bash" / "paraphrases.jsonl"
PAD_SEED = 20240501
INPUT = (
    "Input: nl2bash's paraphrases (../shared/peer-data/nl2bash/paraphrases.jsonl, or --nl2bash FILE); "
    "MiniLM ships with learnerd."
)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--examples", type=int, default=10_000, help="vectors in the index")
    parser.add_argument("--questions", type=int, default=100, help="questions the served version learned")
    parser.add_argument("--requests", type=int, default=400, help="requests timed")
    parser.add_argument("--nl2bash", type=Path, default=NL2BASH, help="nl2bash's paraphrases.jsonl")
    args = parser.parse_args()
    if not args.nl2bash.is_file():
        print(f"{parser.prog}: nl2bash paraphrases not found at {args.nl2bash} ({INPUT})", file=sys.stderr)
        raise SystemExit(2)
    entries = [json.loads(line) for line in args.nl2bash.read_text(encoding="utf-8").splitlines()]
    entries = [e for e in entries if len(e["descriptions"]) >= 2]
    learned = entries[: args.questions]
    others = entries[args.questions :]
    near = [d for e in learned for d in e["descriptions"][1:]]
    far = [e["descriptions"][0] for e in others]
    requests = [t for pair in zip(near, far, strict=False) for t in pair][: args.requests]

    embedder = MiniLMEmbedder()
    questions = [e["descriptions"][0] for e in learned]
    calibration = calibrate(questions, embedder, replay_prompts())
    assert calibration is not None
    router = Router(embedder.embed(questions), calibration.threshold)
    index = VectorIndex(embedder.dim)
    real = embedder.embed([d for e in others for d in e["descriptions"][1:]][: args.examples])
    pad = np.random.default_rng(PAD_SEED).standard_normal((max(0, args.examples - len(real)), embedder.dim))
    pad = (pad / np.linalg.norm(pad, axis=1, keepdims=True)).astype(np.float32)
    vectors = np.concatenate([real, pad])
    index.upsert([f"e{i}" for i in range(len(vectors))], vectors)

    retrieval, beyond, alone = [], [], []
    routed = 0
    with intra_op_threads(1):
        embedder.embed(requests[:4])  # warm-up
        for text in requests:
            t0 = time.perf_counter()
            vector = embedder.embed([text])[0]
            t1 = time.perf_counter()
            nearest_to(index, vector, 3)
            t2 = time.perf_counter()
            route = router.route(vector)
            t3 = time.perf_counter()
            retrieval.append(t2 - t0)
            beyond.append(t3 - t2)
            alone.append((t1 - t0) + (t3 - t2))
            routed += route.routed == "adapter"

    def ms(values: list[float]) -> str:
        return f"p50 {1000 * statistics.median(values):8.3f} ms   p95 {1000 * pct(values, 95):8.3f} ms"

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{len(requests)} requests, {len(vectors)} indexed vectors, {len(questions)} learned questions, threshold "
        f"{calibration.threshold} ({routed} routed to the adapter); {os.cpu_count()} CPUs, load {load:.2f}"
    )
    print(f"retrieval (embed + search k=3)    {ms(retrieval)}")
    print(f"routing beyond retrieval (route)  {ms(beyond)}")
    print(f"routing alone (embed + route)     {ms(alone)}")
    p50 = statistics.median(retrieval)
    print(
        f"ratios at p50: routing beyond ÷ retrieval {statistics.median(beyond) / p50:.4f}, "
        f"routing alone ÷ retrieval {statistics.median(alone) / p50:.3f} (goal: routing beyond <= 5 ms)"
    )


if __name__ == "__main__":
    main()
