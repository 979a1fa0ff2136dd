"""A reconciler's controller spec: how the daemon builds, runs, feeds and drains it — declared once, beside
the reconciler, after controller-runtime's builder (``For``, ``Watches(source, EnqueueRequestsFromMapFunc)``).

Every reconciler module exports one :class:`ControllerSpec` as ``SPEC``; the daemon's table
(:data:`learnerd.daemon.controllers.CONTROLLERS`) is the tuple of them, and everything else derives from
it: the queue and the controller (``[controllers.NAME]`` starts from ``defaults``), the allowed
``[controllers.NAME]`` tables, the start-up resync (the reconciler's ``resync_keys()``), the drain order
(the tuple's order), the fleet's model queues (``model_work``), and the fan-out of changes (``watches``).

The producers a spec may watch (the ``source`` of a :class:`Watch`) and the events they emit:

* :data:`BLOCKS` — a block id (``str``): a block was ingested by the analyzer, or listed by a backfill;
* :data:`EXAMPLES` — an :class:`ExampleChange`: the examples reconciler wrote or deleted an example
  (a backfill emits one with ``old = None`` and the current example for every listed block);
* :data:`ADAPTERS` — an :class:`AdapterCommit`: the training reconciler committed an adapter version, a
  candidate (not served until promoted);
* :data:`PROMOTIONS` — an :class:`AdapterPromotion`: the evaluation's promotion gate made a version the
  document's current one (what serving, the version metric and the fleet's NOTIFY follow).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from learnerd.runtime.reconcile import Reconciler

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from learnerd.eval.report import Report
    from learnerd.eval.settings import EvaluationSettings
    from learnerd.fleet.settings import FleetConfig
    from learnerd.ml.embedders import Embedder
    from learnerd.ml.settings import EmbeddingsConfig
    from learnerd.privacy.settings import PrivacyConfig
    from learnerd.reconcilers.settings import ExamplesConfig, ExportConfig, ProbesConfig
    from learnerd.reconcilers.training import CycleReport
    from learnerd.store.adapters import AdapterVersion, GateVerdict
    from learnerd.store.examples import Example
    from learnerd.store.layout import StateLayout
    from learnerd.store.routing import DocumentRouter
    from learnerd.store.vector_index import VectorIndex
    from learnerd.training.settings import TrainingSettings

BLOCKS = "blocks"
"""The producer of block ids: the analyzer's intake and a backfill's listing."""
EXAMPLES = "examples"
"""The producer of :class:`ExampleChange` events: the examples reconciler (and a backfill)."""
ADAPTERS = "adapters"
"""The producer of :class:`AdapterCommit` events: the training reconciler."""
PROMOTIONS = "promotions"
"""The producer of :class:`AdapterPromotion` events: the evaluation reconciler's promotion gate."""


@dataclass(frozen=True)
class ExampleChange:
    """An example was written or deleted: ``old`` before, ``new`` after (None: absent)."""

    example_id: str
    old: Example | None
    new: Example | None


@dataclass(frozen=True)
class AdapterCommit:
    """An adapter version of the document at ``doc_path`` was committed: a candidate, not yet current."""

    doc_path: str | os.PathLike[str]
    version: AdapterVersion


@dataclass(frozen=True)
class AdapterPromotion:
    """The promotion gate made ``version`` the current adapter version of the document at ``doc_path``."""

    doc_path: str | os.PathLike[str]
    version: AdapterVersion


class RpcDocument(Protocol):
    """What specs read of ``[rpc]`` (declared in :mod:`learnerd.api.settings`, a layer above)."""

    @property
    def document(self) -> str: ...


class ServeRagK(Protocol):
    """What specs read of ``[serve]`` (declared in :mod:`learnerd.api.settings`, a layer above)."""

    @property
    def rag_k(self) -> int: ...
    @property
    def routing(self) -> Literal["similarity", "always-adapter"]: ...
    @property
    def served_context_alpha(self) -> float: ...
    @property
    def served_choice_margin(self) -> float | None: ...


class SpecConfig(Protocol):
    """The sections of the configuration that specs read (the daemon's :class:`learnerd.daemon.config.Config`
    has them; ``reconcilers`` never imports ``daemon``)."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def layout(self) -> StateLayout: ...
    @property
    def examples(self) -> ExamplesConfig: ...
    @property
    def privacy(self) -> PrivacyConfig: ...
    @property
    def embeddings(self) -> EmbeddingsConfig: ...
    @property
    def probes(self) -> ProbesConfig: ...
    @property
    def training(self) -> TrainingSettings: ...
    @property
    def evaluation(self) -> EvaluationSettings: ...
    @property
    def export(self) -> ExportConfig: ...
    @property
    def fleet(self) -> FleetConfig: ...
    @property
    def rpc(self) -> RpcDocument: ...
    @property
    def serve(self) -> ServeRagK: ...


class SpecMetrics(Protocol):
    """The metrics hooks specs pass to their reconcilers (the daemon's
    :class:`learnerd.daemon.metrics.DaemonMetrics`)."""

    def cycle(self, report: CycleReport) -> None: ...
    def evaluated(self, path: Path, report: Report) -> None: ...
    def evaluation_failed(self, path: Path) -> None: ...
    def gate_verdict(self, path: Path, verdict: GateVerdict) -> None: ...
    def vllm_export_failed(self, server: str) -> None: ...


class Wiring(Protocol):
    """What a spec's ``build`` and a watch's ``keys`` may use: the daemon's shared parts.

    ``cfg``: the sections of the configuration a reconciler reads (it passes explicit values to its
    constructor); ``notify(source, event)`` fans an event out to every spec watching ``source`` (and to the
    daemon's own listeners); ``metrics``: the hooks of the daemon's metrics; ``embedder``: the daemon's embedder
    (None until it is loaded: read it when it is needed, not when building).
    """

    @property
    def cfg(self) -> SpecConfig: ...
    @property
    def metrics(self) -> SpecMetrics: ...

    conn: sqlite3.Connection
    clock: Callable[[], float]
    router: DocumentRouter
    index: VectorIndex
    embedder: Embedder | None

    def require_embedder(self) -> Embedder: ...

    def notify(self, source: str, event: Any) -> None: ...


@dataclass(frozen=True)
class Watch:
    """``keys(wiring, event)``: the keys of the watching controller that an event of ``source`` makes stale
    (controller-runtime's ``EnqueueRequestsFromMapFunc``)."""

    source: str
    keys: Callable[[Wiring, Any], Iterable[str]]


@dataclass(frozen=True)
class ControllerSpec:
    """One controller: ``name`` (the one spelling: its queue, its ``[controllers.NAME]`` table, its metrics'
    label, its ``changes`` in the run summary), ``build(wiring)`` its reconciler, ``defaults`` the
    :class:`~learnerd.reconcilers.settings.ControllerConfig` keys it starts from, ``watches`` what feeds it,
    ``key_kind`` what its keys are (in messages: "block id", "document path").

    ``stage``: ``"pipeline"`` queues are drained at shutdown, in the table's order; ``"training"`` is stopped
    instead (a cycle may run for hours) and exists only with ``[training] enabled``. ``shutdown``: how a
    pipeline controller ends at shutdown — ``"drain"``, its queued and in-flight keys are reconciled first;
    ``"cancel"``, at once, first of all: its reconciles in flight are cancelled and its queued keys left (model
    work that runs for minutes; its reconciler must write nothing when cancelled, and its ``resync_keys()``
    lists the key again at the next start). ``needs_embedder``:
    built once the embedder has loaded (ingestion starts before). ``enabled(cfg)``: an optional controller,
    wired only when it returns True. ``model_work``: in a fleet, only replicas with the "train" role own its
    keys (they load models).
    """

    name: str
    build: Callable[[Wiring], Reconciler]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    watches: tuple[Watch, ...] = ()
    stage: Literal["pipeline", "training"] = "pipeline"
    shutdown: Literal["drain", "cancel"] = "drain"
    needs_embedder: bool = False
    enabled: Callable[[SpecConfig], bool] | None = None
    model_work: bool = False
    key_kind: str = "document path"

    def keys_for(self, wiring: Wiring, source: str, event: Any) -> list[str]:
        """The keys an event of ``source`` puts on this controller's queue (none when it does not watch it)."""
        return [key for watch in self.watches if watch.source == source for key in watch.keys(wiring, event)]


def example_id(wiring: Wiring, change: ExampleChange) -> list[str]:
    """A :class:`Watch` map: the changed example's own id (its vector, its export file)."""
    return [change.example_id]
