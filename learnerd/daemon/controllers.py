"""The daemon's controller table: the tuple of the reconcilers' specs, in pipeline order (the order the
queues drain in). Everything about a controller derives from its spec (:mod:`learnerd.reconcilers.spec`):
its queue, its ``[controllers.NAME]`` table and defaults, its resync, its place in the drain, the fleet's
model queues and what feeds it. Adding a reconciler: its module (with its ``SPEC``) and one entry here
(docs/architecture.md).
"""

from __future__ import annotations

from learnerd.reconcilers import (
    embeddings,
    evaluation,
    examples,
    foyle_export,
    gguf_export,
    probes,
    training,
    vllm_export,
)
from learnerd.reconcilers.spec import ControllerSpec

CONTROLLERS: tuple[ControllerSpec, ...] = (
    examples.SPEC,
    embeddings.SPEC,
    foyle_export.SPEC,
    probes.SPEC,
    evaluation.SPEC,
    vllm_export.SPEC,
    gguf_export.SPEC,
    training.SPEC,
)

#: The always-wired pipeline queues, in drain order; optional specs join them when enabled.
PIPELINE: tuple[str, ...] = tuple(s.name for s in CONTROLLERS if s.stage == "pipeline" and s.enabled is None)
#: The training queue: not drained at shutdown but stopped (see :mod:`learnerd.daemon.app`).
TRAINING: str = training.SPEC.name
#: Queues whose keys only replicas with the fleet's "train" role own.
MODEL_QUEUES: tuple[str, ...] = tuple(s.name for s in CONTROLLERS if s.model_work)
