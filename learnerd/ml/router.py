"""Routing between a document's base and its adapter, per request: the adapter answers what is close to what it
learned, the base everything else (DESIGN.md, "Serving and fleet").

**The decision.** A request's embedding ``v`` (the endpoint's embedding of its last user message, the one
retrieval uses) is compared with the embeddings ``Q`` of the questions the served version learned — the user
turns of the document's Q/A pairs in the sections it embodies (:func:`version_routing`). With
``similarity = max_i cos(v, Q_i)`` (unit vectors: one ``(n, dim) @ (dim,)`` product), the request goes to the
adapter when ``similarity >= threshold`` and to the base otherwise (:meth:`Router.route`). A version that learned
no question (prose only) routes everything to its adapter: there is nothing to compare with.

**The threshold, per document** (:func:`calibrate`, computed at the cycle's commit and recorded in the version's
``manifest.json`` under ``routing``). Deterministic, from two sets of similarities under the serving embedder:

* negatives ``n_k = max_i cos(g_k, q_i)``: each prompt ``g_k`` of a general pool against the document's
  questions ``q_i`` — the cycle passes the general replay prompts
  (:func:`learnerd.training.ingredients.replay.replay_prompts`), never the sets that judge a candidate (the
  retention pool, sway's calibration items, the paraphrase holdout);
* positives ``p_ij = cos(q_i, T_j(q_i))``: each question against its rewrites by the templates :data:`TEMPLATES`
  (the question said with other words around it, as a person asks it again);

and ``threshold = min(max_k n_k + MARGIN, min_ij p_ij)``: the lowest threshold that sends every general prompt
of the pool to the base (:data:`MARGIN` above the closest one), but never so high that a templated rewrite of a
learned question would leave its adapter. The recorded entry keeps both bounds. A version without one (committed
before routing existed, or trained without an embedder at hand), or recorded with another embedder than the one
serving, routes with :data:`DEFAULT_THRESHOLD`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import structlog

from learnerd.ml.retrieved_examples import TrainedOn, quoted_to_base, split_learned, trained_on
from learnerd.ml.rows import TrainingRow, document_rows
from learnerd.store.adapters import AdapterStoreError, AdapterVersion
from learnerd.store.dlm import Document, DocumentError, read_document
from learnerd.store.manifest import ManifestError, read_manifest

if TYPE_CHECKING:
    from learnerd.ml.embedders import Embedder

log = structlog.get_logger(__name__)

Routed = Literal["adapter", "base"]
DEFAULT_THRESHOLD = 0.6
"""The threshold of a version without a recorded one (cosine similarity). On all-MiniLM-L6-v2 the calibrated
thresholds of ``examples/commands.dlm`` and of 20 to 100 nl2bash commands fell between 0.57 and 0.68."""
MARGIN = 0.02
"""How far above the closest general prompt of the pool the threshold lies (cosine similarity)."""
TEMPLATES = ("Please answer this: {q}", "{q} Answer in one line.", "Can you help me with this? {q}")
"""The rewrites of each learned question that give the positives (``{q}``: the question)."""
Quoter = Callable[[Sequence[str], Sequence[bool]], list[list[dict[str, Any]]]]
"""Texts and whether their adapter answers each → the retrieved examples quoted with each (:meth:`TextRouter.quoted`,
:func:`no_quotes`)."""
MEMO_SIZE = 8192
"""Embeddings of fixed texts (the pool, the documents' questions, the evaluation's items) kept per embedder."""


@dataclass(frozen=True)
class Route:
    """Which model answers a request: ``routed`` ``"adapter"`` or ``"base"``; ``similarity`` the cosine similarity
    of the request with the nearest learned question (None when none was compared: a base model, a document
    without an adapter or without questions, ``always-adapter``)."""

    routed: Routed
    similarity: float | None = None


ADAPTER = Route("adapter")
"""The route of a request not compared with anything, answered by the adapter."""


@dataclass(frozen=True)
class Calibration:
    """A document's routing threshold and how it was found (the module docstring): ``threshold`` (cosine
    similarity), the ``embedder`` it holds for, the ``questions`` and the ``pool``'s prompts it compared
    (``pool_size``), the closest general prompt (``negatives_max``) and the farthest templated rewrite
    (``positives_min``)."""

    threshold: float
    embedder: str
    questions: int
    pool: str
    pool_size: int
    negatives_max: float
    positives_min: float

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``routing`` entry."""
        return {
            "threshold": self.threshold,
            "embedder": self.embedder,
            "questions": self.questions,
            "negatives": {"pool": self.pool, "size": self.pool_size, "max": self.negatives_max},
            "positives": {"templates": len(TEMPLATES), "min": self.positives_min},
            "rule": f"min(negatives max + {MARGIN}, positives min)",
        }


class Router:
    """One version's routing: the unit embeddings ``vectors`` (float32 ``(n, dim)``, ``n >= 1``) of the questions it
    learned, and its ``threshold``."""

    def __init__(self, vectors: np.ndarray, threshold: float) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or not len(vectors):
            raise ValueError(f"a router needs at least one question vector, not shape {vectors.shape}")
        self.vectors, self.threshold = vectors, threshold

    def similarities(self, vectors: np.ndarray) -> np.ndarray:
        """The nearest question's cosine similarity for each row of ``vectors`` (float32 ``(m, dim)``) → ``(m,)``."""
        return (np.asarray(vectors, dtype=np.float32) @ self.vectors.T).max(axis=1)

    def route(self, vector: np.ndarray) -> Route:
        """The adapter when the nearest question of ``vector`` (float32 ``(dim,)``) is at least ``threshold``
        similar, else the base."""
        return self.route_many(np.asarray(vector).reshape(1, -1))[0]

    def route_many(self, vectors: np.ndarray) -> list[Route]:
        """:meth:`route` of each row of ``vectors`` (float32 ``(m, dim)``)."""
        return [Route("adapter" if s >= self.threshold else "base", float(s)) for s in self.similarities(vectors)]


def close_hits(found: Sequence[Mapping[str, Any]], threshold: float | None) -> list[Mapping[str, Any]]:
    """The retrieved examples ``found`` (each with its cosine ``score``) at or above ``threshold``, in their order:
    those close enough to a request to be quoted to it (None: every one)."""
    return [h for h in found if threshold is None or float(h["score"]) >= threshold]


def served_quotes(
    found: Sequence[Mapping[str, Any]], adapter: bool, threshold: float | None, *, under_block: bool = True
) -> list[dict[str, Any]]:
    """The retrieved examples quoted by default with a request whose ``rag_k`` nearest are ``found`` (each with its
    cosine ``score``, nearest first), by who answers it. Its adapter (``adapter``), when it trained retrieval-augmented
    rows (``under_block``: :attr:`~learnerd.ml.retrieved_examples.TrainedOn.under_block`), every one of them however
    far, as those rows quoted the ``retrieval_k`` nearest (:mod:`learnerd.training.ingredients.retrieval`); an adapter
    that trained without them, those at or above ``threshold`` (:func:`close_hits`); the base the first of those
    (:func:`~learnerd.ml.retrieved_examples.quoted_to_base`), so a request far from every example reaches it unquoted.
    The endpoint then holds back from an adapter what it learned without a block
    (:func:`~learnerd.ml.retrieved_examples.split_learned`)."""
    if adapter and under_block:
        return [dict(h) for h in found]
    close = [dict(h) for h in close_hits(found, threshold)]
    return close if adapter else quoted_to_base(close)


def served_examples(
    found: Sequence[Mapping[str, Any]],
    adapter: bool,
    threshold: float | None,
    trained: TrainedOn,
    *,
    every_hit: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The retrieved examples a request is quoted, in their order, and the ids of those held back: of ``found`` (its
    ``rag_k`` nearest, each with ``id`` and cosine ``score``, nearest first), :func:`served_quotes` by who answers it
    (``adapter``) — every one with ``every_hit`` (a request that set its own ``learnerd.rag_k``) — less, when the
    adapter of a version that learned its examples without a block answers (``trained``: the served version's
    :func:`~learnerd.ml.retrieved_examples.trained_on`), the ones it learned
    (:func:`~learnerd.ml.retrieved_examples.split_learned`). The endpoint quotes by it, and
    ``benchmarks/bench_learning.py``'s served condition."""
    quoted = found if every_hit else served_quotes(found, adapter, threshold, under_block=trained.under_block)
    return split_learned(quoted, trained.held_back if adapter else frozenset())  # split_learned returns copies


def similarity_route(
    has_version: bool,
    router: Router | None,
    learned: float | None,
    hits: Sequence[Mapping[str, Any]],
    *,
    learned_examples: frozenset[str] | None = None,
) -> Route:
    """``[serve] routing = "similarity"``'s decision for one request (the endpoint's, and
    ``benchmarks/bench_learning.py``'s served condition): ``has_version``, the document has a current version;
    ``router`` its router (None: a version that learned no question); ``learned``, the request's similarity to the
    nearest learned question (:meth:`Router.route`); ``hits``, the retrieved examples close enough to quote
    (:func:`close_hits`). Before a first version the base answers (``similarity``: the nearest hit's); a version without
    questions answers everything; otherwise the adapter answers when the nearest of its learned questions is at least
    the router's threshold and no example logged since the version's cycle is nearer (a close hit whose ``id`` is not
    in ``learned_examples``, the version's: :attr:`~learnerd.ml.retrieved_examples.TrainedOn.example_ids`; None: the
    hits are not compared), and the base any other request. A task logged since the
    cycle, asked again, is nearest its own example, which the adapter never learned: quoted it, the base copies it with
    context-aware decoding where the adapter answers what it memorised (docs/benchmarks.md, "Context-aware decoding").
    Hits' scores are rounded to 4 decimals, so ``learned`` is compared at that precision."""
    if not has_version:
        return Route("base", float(hits[0]["score"]) if hits else None)
    if router is None or learned is None:
        return ADAPTER
    known = learned_examples
    unlearned = [float(h["score"]) for h in hits if known is not None and str(h["id"]) not in known]
    if max(unlearned, default=-1.0) > round(learned, 4):
        return Route("base", learned)
    return Route("adapter" if learned >= router.threshold else "base", learned)


def document_questions(rows: Iterable[TrainingRow]) -> list[str]:
    """The distinct user turns of the single-turn Q/A rows among ``rows``, in order: what an adapter trained on
    them learned to answer."""
    return list(document_answers(rows))


def document_answers(rows: Iterable[TrainingRow]) -> dict[str, str]:
    """:func:`document_questions` → the answer of each question's first row: the examples an adapter trained on
    ``rows`` learned."""
    answers: dict[str, str] = {}
    for row in rows:
        if row.messages and sum(m.role == "assistant" for m in row.messages) == 1:
            reply = next(m.content for m in row.messages if m.role == "assistant")
            for m in row.messages:
                if m.role == "user":
                    answers.setdefault(m.content, reply)
    return answers


def calibrate(
    questions: Sequence[str], embedder: Embedder, negatives: Sequence[str], pool: str = "general replay prompts"
) -> Calibration | None:
    """The routing threshold of a document whose adapter learned ``questions`` (module docstring), under
    ``embedder``, against the general prompts ``negatives`` (named ``pool`` in the record); None without
    questions. Deterministic: the same questions, pool and embedder give the same threshold (rounded to 4
    decimals). Blocking (embeds the questions, their rewrites and, once per embedder, the pool).

    Raises:
        EmbedderError: the embedder failed.
        ValueError: ``negatives`` is empty.
    """
    questions = list(dict.fromkeys(questions))
    if not questions:
        return None
    if not negatives:
        raise ValueError("calibrating a routing threshold needs general prompts to keep out")
    pool_prompts = list(negatives)
    rewrites = [t.format(q=q) for q in questions for t in TEMPLATES]
    vectors = embed_memo(embedder, [*questions, *rewrites, *pool_prompts])
    q = vectors[: len(questions)]
    r = vectors[len(questions) : len(questions) + len(rewrites)].reshape(len(questions), len(TEMPLATES), -1)
    closest = float((vectors[len(questions) + len(rewrites) :] @ q.T).max())
    positives = float(np.einsum("qd,qtd->qt", q, r).min())
    threshold = round(min(closest + MARGIN, positives), 4)
    size = len(pool_prompts)
    return Calibration(threshold, embedder.name, len(questions), pool, size, round(closest, 4), round(positives, 4))


def recorded_threshold(routing: Mapping[str, Any] | None, embedder_name: str) -> float:
    """The threshold a manifest's ``routing`` entry records for ``embedder_name``; :data:`DEFAULT_THRESHOLD`
    without an entry, or for an entry of another embedder (its similarities are on another scale)."""
    if routing is None or routing.get("embedder") != embedder_name:
        return DEFAULT_THRESHOLD
    threshold = routing.get("threshold")
    return float(threshold) if isinstance(threshold, int | float) else DEFAULT_THRESHOLD


def version_routing(
    document: Document | str | Path, version: AdapterVersion
) -> tuple[list[str], Mapping[str, Any] | None]:
    """``(questions, routing)`` of ``version``: the questions (:func:`document_questions`) of ``document`` (parsed,
    or its path) in the sections the version embodies (its ``metadata.json``), and its manifest's ``routing``
    entry (None: none recorded). Blocking (reads up to three files). A file that cannot be read is logged and
    counts as empty: no questions (the adapter answers everything, as before routing), or no entry (the default).
    """
    answers, routing = version_examples(document, version)
    return list(answers), routing


def version_examples(
    document: Document | str | Path, version: AdapterVersion
) -> tuple[dict[str, str], Mapping[str, Any] | None]:
    """:func:`version_routing` with each question's learned answer (:func:`document_answers`): ``(answers,
    routing)``. Blocking; a file that cannot be read is logged and counts as empty, as there."""
    try:
        embodied = set(version.metadata().section_ids)
        parsed = document if isinstance(document, Document) else read_document(document)
        rows = [r for r in document_rows(parsed) if r.section_id in embodied]
    except (AdapterStoreError, DocumentError, OSError) as exc:
        log.warning("routing.questions_unknown", version=version.name, error=str(exc))
        rows = []
    try:
        manifest = read_manifest(version.path, version.number)
    except ManifestError as exc:
        log.warning("routing.manifest_unreadable", version=version.name, error=str(exc))
        manifest = None
    return document_answers(rows), manifest.routing if manifest is not None else None


def adapter_alone(texts: Sequence[str]) -> list[Route]:
    """Every text to the adapter, compared with nothing (``[serve] routing = "always-adapter"``)."""
    return [ADAPTER] * len(texts)


def no_quotes(texts: Sequence[str], by_adapter: Sequence[bool] = ()) -> list[list[dict[str, Any]]]:
    """No retrieved example quoted with any text, whoever answers it (``by_adapter``, as :meth:`TextRouter.quoted`;
    ``[serve] rag_k`` 0, or :func:`adapter_alone`'s serving)."""
    return [[] for _ in texts]


@dataclass(frozen=True)
class TextRouter:
    """Texts → their :class:`Route` (``__call__``), as the endpoint routes a request whose last user message is
    the text: ``router`` of a version under ``embedder`` (None: a version without questions, whose adapter
    answers everything). With ``rag_k`` above 0 and ``examples`` (the ``(question, answer)`` learned for each of the
    router's questions, in its order), :meth:`quoted` gives the retrieved examples the endpoint quotes with each
    text. Blocking (embeds the texts through :func:`embed_memo`)."""

    embedder: Embedder
    router: Router | None
    recorded: bool
    examples: tuple[tuple[str, str], ...] = ()
    rag_k: int = 0

    def __call__(self, texts: Sequence[str]) -> list[Route]:
        if self.router is None or not texts:
            return adapter_alone(texts)
        return self.router.route_many(embed_memo(self.embedder, texts))

    def quoted(self, texts: Sequence[str], by_adapter: Sequence[bool]) -> list[list[dict[str, Any]]]:
        """For each of ``texts``, the learned examples the endpoint quotes with it (``[serve] rag_k``) when its
        adapter answers it (``by_adapter``, one per text) or the base: :func:`served_quotes` of its ``rag_k``
        nearest (each ``{"id", "query", "answer", "score"}``, ``score`` the cosine similarity, nearest first). The
        document's examples stand for the daemon's index, which holds the examples the document was written from;
        none without ``examples``."""
        if self.router is None or not self.examples or self.rag_k <= 0 or not texts:
            return no_quotes(texts, by_adapter)
        similarities = embed_memo(self.embedder, texts) @ self.router.vectors.T  # (m, n)
        out = []
        for row, adapter in zip(similarities, by_adapter, strict=True):
            nearest = np.argsort(-row, kind="stable")[: self.rag_k]
            found = [
                {
                    "id": f"learned-{j}",
                    "query": self.examples[j][0],
                    "answer": self.examples[j][1],
                    "score": float(row[j]),
                }
                for j in nearest
            ]
            out.append(served_quotes(found, adapter, self.router.threshold))
        return out

    def describe(self) -> dict[str, Any]:
        """``{"mode": "similarity", "embedder", "threshold", "recorded", "questions", "rag_k"}`` (``recorded``: the
        threshold is the manifest's, not the default; ``threshold`` None without questions; ``rag_k`` the learned
        examples quoted per request, 0 when none are)."""
        return {
            "mode": "similarity",
            "embedder": self.embedder.name,
            "threshold": self.router.threshold if self.router is not None else None,
            "recorded": self.recorded,
            "questions": len(self.router.vectors) if self.router is not None else 0,
            "rag_k": self.rag_k if self.examples else 0,
        }


def text_router(document: Document, version: AdapterVersion, embedder: Embedder, rag_k: int = 0) -> TextRouter:
    """The :class:`TextRouter` of ``version`` of ``document`` under ``embedder``: its questions
    (:func:`version_routing`) embedded now, its threshold :func:`recorded_threshold`; with ``rag_k`` (``[serve]
    rag_k``) above 0, its learned examples quoted as the endpoint quotes them — only to a version that trained under
    retrieved examples (``retrieval_k`` above 0 in its hyperparameters), as the endpoint holds them back from any
    other (:attr:`learnerd.ml.retrieved_examples.TrainedOn.held_back`). Blocking.

    Raises:
        EmbedderError: the embedder failed.
    """
    answers, routing = version_examples(document, version)
    questions = list(answers)
    threshold = recorded_threshold(routing, embedder.name)
    recorded = routing is not None and routing.get("embedder") == embedder.name
    router = Router(embed_memo(embedder, questions), threshold) if questions else None
    examples = tuple(answers.items()) if rag_k > 0 and trained_on(version).under_block else ()
    return TextRouter(embedder, router, recorded, examples, rag_k if examples else 0)


_memos: weakref.WeakKeyDictionary[Any, OrderedDict[str, np.ndarray]] = weakref.WeakKeyDictionary()
_memo_lock = threading.Lock()


def embed_memo(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """``embedder.embed(texts)`` (float32 ``(len(texts), dim)``), embedding only the texts this embedder has not
    embedded through here among the last :data:`MEMO_SIZE`: the pool and the evaluation's items are the same texts
    at every cycle and evaluation. Blocking.

    Raises:
        EmbedderError: the embedder failed.
    """
    with _memo_lock:
        memo = _memos.setdefault(embedder, OrderedDict())
        found = {t: memo[t] for t in texts if t in memo}
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing:
        found.update(zip(missing, embedder.embed(missing), strict=True))
    with _memo_lock:
        for text in texts:
            memo[text] = found[text]
            memo.move_to_end(text)
        while len(memo) > MEMO_SIZE:
            memo.popitem(last=False)
    return np.stack([found[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)


def routing_entry(
    rows: Sequence[TrainingRow], embedder: Embedder | None, negatives: Sequence[str]
) -> dict[str, Any] | None:
    """The manifest's ``routing`` entry of a version trained on ``rows`` (:func:`calibrate` of their questions
    against ``negatives``), or None: no embedder, no question, or an embedder that failed (logged: the version
    routes with the default rather than a trained cycle being lost). Blocking."""
    from learnerd.ml.embedders import EmbedderError

    if embedder is None:
        return None
    try:
        calibration = calibrate(document_questions(rows), embedder, negatives)
    except EmbedderError as exc:
        log.warning("routing.not_calibrated", error=str(exc), default=DEFAULT_THRESHOLD)
        return None
    return calibration.to_dict() if calibration is not None else None
