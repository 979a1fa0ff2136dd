"""The steering logits processor and the steering file that carries its deltas.

:class:`ClusterBiasProcessor` is a ``transformers.LogitsProcessor`` that adds ``deltas[c]`` to the logit
of every token in cluster ``c`` (:mod:`learnerd.steering.clusters`) at every decoding step: one bias
vector of vocabulary size, built once per device and dtype, added to the ``(batch, vocab)`` scores.
Zero deltas leave the scores bit-identical (``x + 0.0 == x``), so unsteered and zero-steered greedy
decoding produce the same tokens. Logit positions beyond the tokenizer's vocabulary (models whose
embedding matrix is padded) get no bias.

A steering file (``deltas_best.json`` and ``deltas_current.json`` of an ``learnerd evolve`` run, or any
copy) is a small JSON object::

    {
      "format": "learnerd-steering",
      "schema_version": 1,
      "tokenizer_identity": "vocab-262-…",          # learnerd.steering.clusters.tokenizer_identity
      "clusters": {"path": "token_clusters.json",     # relative to the steering file's directory, or absolute
                   "sha256": "…", "k": 10, "embedder": "all-MiniLM-L6-v2"},
      "deltas": {"0": -0.5, "1": 0.0, "2": 1.25, …}, # one finite float per cluster id 0 … k+1 (logits)
      "evaluation": {…}                               # optional: where the deltas came from (iteration, scores)
    }

:func:`load_steering` refuses a file whose tokenizer identity is not the model's, whose cluster map is
missing or changed (sha256), or whose deltas do not cover exactly the map's clusters.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from transformers import LogitsProcessor

from learnerd.steering.clusters import ClusterError, VocabularyClusters, load_clusters, tokenizer_identity
from learnerd.store.atomic import atomic_write_text

FORMAT = "learnerd-steering"
SCHEMA_VERSION = 1


class SteeringError(ValueError):
    """A steering file or a set of deltas cannot be used: malformed, for another tokenizer, out of bounds."""


class ClusterBiasProcessor(LogitsProcessor):
    """Adds ``deltas[cluster(token)]`` to every token's logit.

    Args:
        token_clusters: int array ``(vocab_size,)``, the cluster of each token id.
        deltas: one float per cluster id ``0 … len(deltas) - 1`` (logits).

    Raises:
        SteeringError: a token's cluster has no delta.
    """

    def __init__(self, token_clusters: np.ndarray, deltas: Sequence[float]) -> None:
        import torch

        clusters = np.asarray(token_clusters, dtype=np.int64)
        if clusters.size and (clusters.min() < 0 or clusters.max() >= len(deltas)):
            raise SteeringError(f"the cluster map has clusters outside 0..{len(deltas) - 1}")
        self.deltas = tuple(float(d) for d in deltas)
        self._bias = torch.tensor(self.deltas, dtype=torch.float64)[torch.from_numpy(clusters)]
        self._cache: dict[tuple[Any, Any, int], Any] = {}

    @property
    def vocab_size(self) -> int:
        return int(self._bias.shape[0])

    def token_bias(self) -> np.ndarray:
        """float64 ``(vocab_size,)``: the delta added to each token id's logit."""
        return self._bias.numpy()

    def bias(self, vocab: int, device: Any, dtype: Any) -> Any:
        """The ``(vocab,)`` bias on ``device`` in ``dtype`` (cached); zeros past the tokenizer's vocabulary.

        Raises:
            SteeringError: ``vocab`` is smaller than the cluster map (another tokenizer's scores).
        """
        import torch

        key = (device, dtype, vocab)
        cached = self._cache.get(key)
        if cached is None:
            if vocab < self.vocab_size:
                raise SteeringError(f"scores have {vocab} logits, fewer than the {self.vocab_size}-token cluster map")
            full = torch.zeros(vocab, dtype=torch.float64)
            full[: self.vocab_size] = self._bias
            cached = self._cache[key] = full.to(device=device, dtype=dtype)
        return cached

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """``scores`` ``(batch, vocab)`` plus the bias, broadcast over the batch."""
        return scores + self.bias(scores.shape[-1], scores.device, scores.dtype)


@dataclass(frozen=True)
class SteeringFile:
    """A steering file as read: ``deltas`` by cluster id, the tokenizer it is for, its cluster map."""

    deltas: dict[int, float]
    tokenizer_identity: str
    clusters_path: Path
    clusters_sha256: str
    k: int
    evaluation: dict[str, Any] = field(default_factory=dict)


def validate_deltas(
    raw: Any, cluster_ids: Sequence[int], bound: float | Mapping[int, tuple[float, float]] | None = None
) -> dict[int, float]:
    """Check a ``{"<id>": value}`` mapping against the clustering: exactly ``cluster_ids`` as keys (strings
    or ints), every value a finite JSON number (not a bool, not a string), within the bounds when given:
    ``|value| <= bound`` for a number, ``low <= value <= high`` for a mapping of each id's ``(low, high)``.

    Returns:
        ``{id: float}`` in id order.

    Raises:
        SteeringError: the first problem found, naming the ids involved.
    """
    if not isinstance(raw, Mapping):
        raise SteeringError(f"deltas must be an object keyed by cluster id, not {type(raw).__name__}")
    keys: dict[int, Any] = {}
    for key, value in raw.items():
        try:
            number = int(key)
        except (TypeError, ValueError):
            raise SteeringError(f"deltas: {key!r} is not a cluster id") from None
        if str(number) != str(key).strip() or number in keys:
            raise SteeringError(f"deltas: {key!r} is not a cluster id in canonical form")
        keys[number] = value
    expected = set(cluster_ids)
    missing, extra = sorted(expected - set(keys)), sorted(set(keys) - expected)
    if missing or extra:
        parts = [
            f"missing cluster id(s) {missing}" if missing else "",
            f"unknown cluster id(s) {extra}" if extra else "",
        ]
        raise SteeringError("deltas: " + "; ".join(p for p in parts if p))
    out: dict[int, float] = {}
    for cid in sorted(keys):
        value = keys[cid]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise SteeringError(f"deltas: cluster {cid}'s value {value!r} is not a finite number")
        low, high = (-bound, bound) if isinstance(bound, int | float) else (bound or {}).get(cid, (-math.inf, math.inf))
        if not low <= value <= high:
            raise SteeringError(f"deltas: cluster {cid}'s value {value} is outside [{low}, {high}]")
        out[cid] = float(value)
    return out


def deltas_json(deltas: Mapping[int, float]) -> dict[str, float]:
    """``{id: value}`` → ``{"id": value}`` in id order (the JSON form)."""
    return {str(cid): float(deltas[cid]) for cid in sorted(deltas)}


def write_steering(
    path: str | os.PathLike[str],
    deltas: Mapping[int, float],
    clusters: VocabularyClusters,
    evaluation: Mapping[str, Any] | None = None,
) -> None:
    """Write a steering file atomically. ``clusters.map_path`` must be set (a saved clustering); it is
    referenced relative to ``path``'s directory when it lies inside it, else absolutely.

    Raises:
        SteeringError: the clustering was never saved, or ``deltas`` do not match it.
    """
    target = Path(path)
    if clusters.map_path is None or clusters.map_sha256 is None:
        raise SteeringError("the clustering has no saved token_clusters.json to reference")
    validate_deltas({str(k): v for k, v in deltas.items()}, clusters.cluster_ids)
    map_path = clusters.map_path.resolve()
    try:
        reference = str(map_path.relative_to(target.parent.resolve()))
    except ValueError:
        reference = str(map_path)
    payload = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "tokenizer_identity": clusters.tokenizer_identity,
        "clusters": {"path": reference, "sha256": clusters.map_sha256, "k": clusters.k, "embedder": clusters.embedder},
        "deltas": deltas_json(deltas),
    }
    if evaluation:
        payload["evaluation"] = dict(evaluation)
    atomic_write_text(target, json.dumps(payload, indent=2) + "\n")


def read_steering(path: str | os.PathLike[str]) -> SteeringFile:
    """Parse a steering file (without checking it against a model: see :func:`load_steering`).

    Raises:
        SteeringError: unreadable, not JSON, not a steering file, or malformed deltas.
    """
    file = Path(path)
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SteeringError(f"{file}: cannot read the steering file: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SteeringError(f"{file}: not JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SteeringError(f'{file}: not a learnerd steering file (no "format": "{FORMAT}")')
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise SteeringError(f"{file}: unsupported schema_version {raw.get('schema_version')!r}")
    try:
        ref = raw["clusters"]
        k = int(ref["k"])
        clusters_path = Path(ref["path"])
        if not clusters_path.is_absolute():
            clusters_path = file.parent / clusters_path
        deltas = validate_deltas(raw["deltas"], range(k + 2))
        return SteeringFile(
            deltas=deltas,
            tokenizer_identity=str(raw["tokenizer_identity"]),
            clusters_path=clusters_path,
            clusters_sha256=str(ref["sha256"]),
            k=k,
            evaluation=dict(raw.get("evaluation") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SteeringError(f"{file}: malformed steering file: {exc}") from exc


def load_steering(path: str | os.PathLike[str], tokenizer: Any) -> ClusterBiasProcessor:
    """The processor of a steering file, for a model whose tokenizer is ``tokenizer``.

    Raises:
        SteeringError: the file is malformed, was made for another tokenizer (identities differ), or
            its cluster map is missing, changed or for another tokenizer.
    """
    steering = read_steering(path)
    identity = tokenizer_identity(tokenizer)
    if steering.tokenizer_identity != identity:
        raise SteeringError(
            f"{path}: made for tokenizer {steering.tokenizer_identity}, but this model's tokenizer is {identity}; "
            "evolve deltas for this model instead"
        )
    try:
        clusters = load_clusters(steering.clusters_path, expected_sha256=steering.clusters_sha256)
    except ClusterError as exc:
        raise SteeringError(f"{path}: {exc}") from exc
    if clusters.tokenizer_identity != identity or clusters.k != steering.k:
        raise SteeringError(f"{path}: its cluster map {steering.clusters_path} is for another tokenizer or K")
    return processor_for(clusters, steering.deltas)


def processor_for(clusters: VocabularyClusters, deltas: Mapping[int, float]) -> ClusterBiasProcessor:
    """:class:`ClusterBiasProcessor` of ``deltas`` (validated against ``clusters``' ids) over ``clusters``.

    Raises:
        SteeringError: ``deltas`` do not name exactly the clustering's ids.
    """
    checked = validate_deltas({str(k): v for k, v in deltas.items()}, clusters.cluster_ids)
    return ClusterBiasProcessor(clusters.token_clusters, [checked[c] for c in clusters.cluster_ids])
