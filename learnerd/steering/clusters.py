"""Vocabulary clusters: every token id of a tokenizer in exactly one of ``K + 2`` clusters, the unit a
steering delta applies to (:mod:`learnerd.steering.processor`).

* **Cluster 0 — end of sequence.** The union of ``tokenizer.eos_token_id`` and the generation config's
  ``eos_token_id`` (an int or a list: Llama-3 stops at ``<|end_of_text|>`` and ``<|eot_id|>``). A
  tokenizer with neither (an encoder tokenizer such as MiniLM's BERT WordPiece) falls back to its
  ``sep_token_id``, the token that ends its sequences. A positive delta on 0 ends answers sooner.
* **Cluster 1 — numbers and arithmetic** (rule version :data:`RULE_VERSION`). A token is in it when
  its text, decoded alone, with every whitespace character removed and a leading ``##`` (WordPiece's
  continuation prefix) dropped, is non-empty and each character is a Unicode number (general category
  ``Nd``, ``Nl`` or ``No``: ``7``, ``٣``, ``²``, ``½``), a currency symbol (category ``Sc``: ``$ € £ ¥``)
  or one of :data:`ARITHMETIC_SYMBOLS` (``+ - * / = % . , ^ < >`` and their typographic forms). So
  ``" 42"``, ``"##5"``, ``"3.14"``, ``"$"``, ``"%"`` and ``"..."`` are in it; ``"3rd"``, ``"mp3"``,
  ``"("`` and ``"x"`` are not. An EOS id is in cluster 0 whatever it decodes to.
* **Clusters 2 … K+1 — k-means.** Every other token is decoded alone; its text stripped of surrounding
  whitespace and of a leading ``##`` (or, when that leaves nothing, its raw vocabulary string such as
  ``Ċ``) is embedded with the configured embedder (unit rows). The *distinct* texts, each once, are
  reduced by PCA (numpy SVD of the centred vectors, the first ``pca_dim`` right singular vectors) and
  clustered with ``faiss.Kmeans`` (``seed``, 25 iterations); each token joins the centroid nearest its text.
  Numbering follows faiss's centroid order, plus 2. (Rule version 2; version 1 clustered one vector per
  token, so a text many byte tokens decode to — 152 of the tiny model's 238 — outweighed the rest and could
  leave a centroid with no token.)

Two files describe a clustering (both JSON, written atomically):

* ``token_clusters.json`` — the token → cluster map: ``{"schema_version": 1, "tokenizer_identity",
  "embedder", "k", "seed", "pca_dim", "rule_version", "eos_ids", "num_clusters", "token_clusters":
  [cluster of id 0, cluster of id 1, …]}``; its sha256 is what a steering file pins;
* ``cluster_descriptions.json`` — for people and the reflector: ``{"schema_version": 1,
  "tokenizer_identity", "embedder", "k", "seed", "clusters": [{"id", "kind": "fixed" | "k-means",
  "meaning", "size", "samples": [token texts]}]}``; k-means samples are the members nearest the centroid.

:func:`load_or_build_clusters` caches both under ``<cache_root>/<key>/`` where ``key`` hashes the
tokenizer identity, the embedder name, K, the seed, the EOS ids, ``pca_dim`` and the rule version, so
a tokenizer's clusters are built once (MiniLM's 30,522 tokens take about a minute of CPU to embed).
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from learnerd.store.atomic import atomic_write_bytes, atomic_write_text

RULE_VERSION = 2
"""Version of the rules above (fixed clusters, embedded texts); bumped when they change (a new cache key)."""

EOS_CLUSTER = 0
NUMBER_CLUSTER = 1
FIRST_KMEANS_CLUSTER = 2
ARITHMETIC_SYMBOLS = frozenset("+-*/=%.,^<>×÷−±∓√≈≠≤≥‰")
"""Characters that, with digits and currency symbols, make a token a cluster-1 token."""

MAP_FILE = "token_clusters.json"
DESCRIPTIONS_FILE = "cluster_descriptions.json"
SCHEMA_VERSION = 1
SAMPLES_PER_CLUSTER = 12
KMEANS_ITERATIONS = 25
EMBED_CHUNK = 1024
"""Tokens embedded per call, so a progress callback can report."""

_MEANINGS = {
    EOS_CLUSTER: (
        "end of sequence: the EOS / end-of-turn token ids of the tokenizer and generation config; "
        "a positive delta ends answers sooner, a negative one makes them run on"
    ),
    NUMBER_CLUSTER: "numbers and arithmetic: digits, currency symbols and + - * / = % . , ^ < > (and similar)",
}


class ClusterError(ValueError):
    """Clusters cannot be built (no EOS id, fewer tokens than clusters) or a cluster file is invalid."""


@dataclass(frozen=True)
class VocabularyClusters:
    """A clustering of one tokenizer's vocabulary.

    ``token_clusters`` is an int32 array of shape ``(vocab_size,)``: the cluster of each token id.
    ``map_path`` / ``map_sha256`` name the ``token_clusters.json`` it was read from or written to
    (None before it is saved); ``descriptions`` is the ``cluster_descriptions.json`` content.
    """

    token_clusters: np.ndarray
    k: int
    tokenizer_identity: str
    embedder: str
    seed: int
    pca_dim: int
    eos_ids: tuple[int, ...]
    descriptions: dict[str, Any]
    map_path: Path | None = None
    map_sha256: str | None = None

    @property
    def num_clusters(self) -> int:
        """``k + 2``: the two fixed clusters and the k-means ones."""
        return self.k + 2

    @property
    def cluster_ids(self) -> tuple[int, ...]:
        """``(0, 1, …, k + 1)``."""
        return tuple(range(self.num_clusters))

    @property
    def vocab_size(self) -> int:
        return int(self.token_clusters.shape[0])

    def members(self, cluster: int) -> np.ndarray:
        """Token ids in ``cluster`` (int64, ascending)."""
        return np.flatnonzero(self.token_clusters == cluster)


def tokenizer_identity(tokenizer: Any) -> str:
    """``vocab-<size>-<16 hex>``: sha256 over the vocabulary (every ``(token, id)`` pair of
    ``get_vocab()``, added tokens included, in id order). Equal vocabularies give equal identities;
    the chat template and other settings do not count."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: (kv[1], kv[0]))
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"vocab-{len(vocab)}-{digest[:16]}"


def eos_token_ids(tokenizer: Any, generation_config: Any = None) -> tuple[int, ...]:
    """Cluster 0's ids (sorted): ``tokenizer.eos_token_id`` ∪ ``generation_config.eos_token_id`` (int or
    list), else ``tokenizer.sep_token_id`` for a tokenizer without EOS.

    Raises:
        ClusterError: none of them is set.
    """
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(v for v in value if isinstance(v, int))
    if not ids and isinstance(getattr(tokenizer, "sep_token_id", None), int):
        ids.add(tokenizer.sep_token_id)
    if not ids:
        raise ClusterError("the tokenizer and generation config name no EOS (or SEP) token id")
    return tuple(sorted(ids))


def is_number_token(text: str) -> bool:
    """The cluster-1 rule (module docstring) on a token's text decoded alone."""
    core = "".join(text.split())
    if core.startswith("##"):
        core = core[2:]
    return bool(core) and all(
        unicodedata.category(ch) in ("Nd", "Nl", "No", "Sc") or ch in ARITHMETIC_SYMBOLS for ch in core
    )


def embedding_text(decoded: str, raw_token: str) -> str:
    """What a k-means token is embedded as: its decoded text without surrounding whitespace or a leading
    ``##`` (so WordPiece's ``##ing`` sits with ``ing``), or its raw vocabulary string when that is empty."""
    text = decoded.strip()
    if text.startswith("##") and len(text) > 2:
        text = text[2:]
    return text or raw_token


def decode_tokens(tokenizer: Any) -> list[str]:
    """Each token id ``0 … len(tokenizer) - 1`` decoded alone, special tokens kept as their text."""
    return tokenizer.batch_decode(
        [[i] for i in range(len(tokenizer))], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def cache_key(identity: str, embedder: str, k: int, seed: int, eos_ids: Sequence[int], pca_dim: int) -> str:
    """16 hex digits naming a clustering's cache directory."""
    payload = json.dumps(
        {
            "tokenizer": identity,
            "embedder": embedder,
            "k": k,
            "seed": seed,
            "eos": sorted(eos_ids),
            "pca_dim": pca_dim,
            "rule": RULE_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def build_clusters(
    tokenizer: Any,
    embedder: Any,
    *,
    k: int,
    seed: int,
    eos_ids: Iterable[int],
    pca_dim: int = 32,
    on_progress: Callable[[int, int], None] | None = None,
) -> VocabularyClusters:
    """Cluster ``tokenizer``'s vocabulary (module docstring). Not saved: see :func:`save_clusters`.

    Args:
        embedder: a :class:`learnerd.ml.embedders.Embedder` (``embed(texts)`` → unit float32 rows).
        k: k-means clusters (numbered 2 … k + 1).
        eos_ids: cluster 0 (:func:`eos_token_ids`).
        on_progress: called with ``(texts embedded, distinct texts to embed)`` after each chunk.

    Raises:
        ClusterError: ``k`` < 1, an EOS id outside the vocabulary, or fewer tokens (or distinct token texts)
            left for k-means than ``k``.
    """
    import faiss

    if k < 1:
        raise ClusterError(f"k must be >= 1, not {k}")
    texts = decode_tokens(tokenizer)
    n = len(texts)
    eos = tuple(sorted(set(eos_ids)))
    if not eos or any(not 0 <= i < n for i in eos):
        raise ClusterError(f"EOS ids {list(eos)} are not token ids of this {n}-token vocabulary")
    assignment = np.full(n, -1, dtype=np.int32)
    assignment[list(eos)] = EOS_CLUSTER
    for i, text in enumerate(texts):
        if assignment[i] < 0 and is_number_token(text):
            assignment[i] = NUMBER_CLUSTER
    rest = np.flatnonzero(assignment < 0)
    if len(rest) < k:
        raise ClusterError(f"only {len(rest)} tokens are left for k-means, fewer than k = {k}")
    raw = tokenizer.convert_ids_to_tokens([int(i) for i in rest])
    inputs = [embedding_text(texts[i], str(raw_token)) for i, raw_token in zip(rest, raw, strict=True)]
    unique = list(dict.fromkeys(inputs))
    row = {text: n for n, text in enumerate(unique)}
    if len(unique) < k:
        raise ClusterError(f"only {len(unique)} distinct token texts are left for k-means, fewer than k = {k}")
    reduced = _pca(_embed(embedder, unique, on_progress), pca_dim)
    kmeans = faiss.Kmeans(
        reduced.shape[1], k, niter=KMEANS_ITERATIONS, seed=seed, verbose=False, min_points_per_centroid=1
    )
    kmeans.train(reduced)
    distances, nearest = kmeans.index.search(reduced, 1)
    rows = [row[t] for t in inputs]
    assignment[rest] = nearest[rows, 0].astype(np.int32) + FIRST_KMEANS_CLUSTER
    identity = tokenizer_identity(tokenizer)
    clusters = VocabularyClusters(
        token_clusters=assignment,
        k=k,
        tokenizer_identity=identity,
        embedder=embedder.name,
        seed=seed,
        pca_dim=reduced.shape[1],
        eos_ids=eos,
        descriptions={},
    )
    closeness = np.full(n, np.inf, dtype=np.float64)
    closeness[rest] = distances[rows, 0]
    return replace(clusters, descriptions=_describe(clusters, texts, closeness))


def map_bytes(clusters: VocabularyClusters) -> bytes:
    """The ``token_clusters.json`` bytes of ``clusters`` (deterministic: equal clusterings, equal bytes)."""
    payload = {
        "schema_version": SCHEMA_VERSION,
        "tokenizer_identity": clusters.tokenizer_identity,
        "embedder": clusters.embedder,
        "k": clusters.k,
        "seed": clusters.seed,
        "pca_dim": clusters.pca_dim,
        "rule_version": RULE_VERSION,
        "eos_ids": list(clusters.eos_ids),
        "num_clusters": clusters.num_clusters,
        "token_clusters": clusters.token_clusters.tolist(),
    }
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode("utf-8")


def save_clusters(clusters: VocabularyClusters, directory: str | os.PathLike[str]) -> VocabularyClusters:
    """Write ``cluster_descriptions.json`` then ``token_clusters.json`` into ``directory`` (created),
    each atomically; return ``clusters`` with ``map_path`` / ``map_sha256`` set."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / DESCRIPTIONS_FILE, json.dumps(clusters.descriptions, indent=2, ensure_ascii=False) + "\n")
    data = map_bytes(clusters)
    atomic_write_bytes(out / MAP_FILE, data)
    return replace(clusters, map_path=out / MAP_FILE, map_sha256=hashlib.sha256(data).hexdigest())


def load_clusters(map_path: str | os.PathLike[str], expected_sha256: str | None = None) -> VocabularyClusters:
    """Read a ``token_clusters.json`` (and the ``cluster_descriptions.json`` beside it, if present).

    Raises:
        ClusterError: unreadable, malformed, or its sha256 is not ``expected_sha256``.
    """
    path = Path(map_path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read the cluster map: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise ClusterError(f"{path}: the cluster map changed (sha256 {digest[:16]}…, expected {expected_sha256[:16]}…)")
    try:
        raw = json.loads(data)
        k = raw["k"]
        assignment = np.asarray(raw["token_clusters"], dtype=np.int32)
        clusters = VocabularyClusters(
            token_clusters=assignment,
            k=int(k),
            tokenizer_identity=str(raw["tokenizer_identity"]),
            embedder=str(raw["embedder"]),
            seed=int(raw["seed"]),
            pca_dim=int(raw["pca_dim"]),
            eos_ids=tuple(int(i) for i in raw["eos_ids"]),
            descriptions={},
            map_path=path,
            map_sha256=digest,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path}: not a learnerd cluster map: {exc}") from exc
    if raw.get("schema_version") != SCHEMA_VERSION or assignment.ndim != 1:
        raise ClusterError(f"{path}: unsupported cluster map (schema_version {raw.get('schema_version')!r})")
    if assignment.size and (assignment.min() < 0 or assignment.max() >= clusters.num_clusters):
        raise ClusterError(f"{path}: a token's cluster is outside 0..{clusters.num_clusters - 1}")
    descriptions = path.parent / DESCRIPTIONS_FILE
    if descriptions.is_file():
        try:
            clusters = replace(clusters, descriptions=json.loads(descriptions.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ClusterError(f"{descriptions}: unreadable cluster descriptions: {exc}") from exc
    return clusters


def load_or_build_clusters(
    tokenizer: Any,
    *,
    embedder_name: str,
    make_embedder: Callable[[], Any],
    k: int,
    seed: int,
    eos_ids: Iterable[int],
    cache_root: str | os.PathLike[str],
    pca_dim: int = 32,
    on_progress: Callable[[int, int], None] | None = None,
) -> VocabularyClusters:
    """The cached clustering under ``<cache_root>/<cache_key>/``, built and saved there first if missing.

    Args:
        embedder_name: the configured embedder's name (``learnerd.ml.embedders.embedder_name``): part of the key.
        make_embedder: called only when the cache misses (loading an embedder takes seconds).

    Raises:
        ClusterError: see :func:`build_clusters` and :func:`load_clusters`.
        EmbedderError: the embedder failed.
    """
    eos = tuple(sorted(set(eos_ids)))
    identity = tokenizer_identity(tokenizer)
    directory = Path(cache_root) / cache_key(identity, embedder_name, k, seed, eos, pca_dim)
    if (directory / MAP_FILE).is_file():
        cached = load_clusters(directory / MAP_FILE)
        if cached.tokenizer_identity == identity and cached.vocab_size == len(tokenizer):
            return cached
    embedder = make_embedder()
    if embedder.name != embedder_name:
        raise ClusterError(f"the embedder is {embedder.name!r}, not {embedder_name!r}")
    built = build_clusters(tokenizer, embedder, k=k, seed=seed, eos_ids=eos, pca_dim=pca_dim, on_progress=on_progress)
    return save_clusters(built, directory)


def _embed(embedder: Any, texts: Sequence[str], on_progress: Callable[[int, int], None] | None) -> np.ndarray:
    chunks = []
    for start in range(0, len(texts), EMBED_CHUNK):
        chunks.append(np.asarray(embedder.embed(list(texts[start : start + EMBED_CHUNK])), dtype=np.float32))
        if on_progress is not None:
            on_progress(min(start + EMBED_CHUNK, len(texts)), len(texts))
    return np.concatenate(chunks)


def _pca(vectors: np.ndarray, dims: int) -> np.ndarray:
    """Project ``vectors`` (n, d) onto their first ``min(dims, n, d)`` principal axes: float32, C order."""
    centred = vectors.astype(np.float64) - vectors.mean(axis=0, dtype=np.float64)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    keep = max(1, min(dims, vt.shape[0]))
    return np.ascontiguousarray(centred @ vt[:keep].T, dtype=np.float32)


def _describe(clusters: VocabularyClusters, texts: Sequence[str], closeness: np.ndarray) -> dict[str, Any]:
    entries = []
    for cluster in clusters.cluster_ids:
        members = clusters.members(cluster)
        fixed = cluster < FIRST_KMEANS_CLUSTER
        order = members if fixed else members[np.argsort(closeness[members], kind="stable")]
        samples = list(dict.fromkeys(texts[i] for i in order))[:SAMPLES_PER_CLUSTER]
        entries.append(
            {
                "id": cluster,
                "kind": "fixed" if fixed else "k-means",
                "meaning": _MEANINGS.get(cluster, "tokens whose embeddings lie near each other (see the samples)"),
                "size": len(members),
                "samples": samples,
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "tokenizer_identity": clusters.tokenizer_identity,
        "embedder": clusters.embedder,
        "k": clusters.k,
        "seed": clusters.seed,
        "clusters": entries,
    }
