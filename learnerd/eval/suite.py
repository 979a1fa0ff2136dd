"""Run every probe against one adapter version and build its sway schema-1 report.

Order: a preflight finite check of both views (a failure gives a report with one ``preflight`` error
probe and nothing else), then the probes of :data:`~learnerd.eval.probes.PROBES`: the ``null_adapter``
calibration (its statistics feed the z-scores), ``probe_recall`` (one result per probe pair), ``delta_kl``,
``multi_turn_coherence_decay``, ``section_internalization``, and the retention probes
``paraphrase_invariance``, ``calibration_drift`` and ``answer_retention``. A probe that raises becomes an
``error`` result; the others still run.

Report fields: ``sway_version`` is the sway release whose report schema and probe semantics learnerd
follows (``0.1.0``, as in real reports); ``generator`` (an extra top-level key, kept by readers) says
learnerd wrote it; ``base_model_id`` is the document's ``base_model``, ``adapter_id`` the version's
directory, ``spec_path`` the document; ``learnerd`` holds the document's ``dlm_id``, the adapter version
and the base's identity.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from learnerd import __version__
from learnerd.eval.backend import DifferentialBackend, NonFiniteLogitsError
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import CALIBRATED, PROBES
from learnerd.eval.probes.base import EvalOptions, ProbeContext
from learnerd.eval.probes.common import errored
from learnerd.eval.report import ProbeResult, Report
from learnerd.eval.score import compute_score
from learnerd.ml.base_model import BaseModelRef
from learnerd.ml.device import Placement
from learnerd.ml.embedders import Embedder
from learnerd.ml.router import Quoter, Route, adapter_alone, no_quotes, text_router
from learnerd.ml.undertrained import undertrained_finding
from learnerd.store.adapters import AdapterVersion
from learnerd.store.dlm import Document

SWAY_VERSION = "0.1.0"


def total_steps(options: EvalOptions) -> int:
    """How many times an evaluation with ``options`` reports progress: once per calibrated probe kind and
    noise seed, and once after each probe."""
    return len(CALIBRATED) * options.null_runs + len(PROBES)


def evaluate(
    backend: DifferentialBackend,
    document: Document,
    *,
    base_model_id: str,
    adapter_id: str,
    options: EvalOptions | None = None,
    extra: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    route: Callable[[Sequence[str]], list[Route]] = adapter_alone,
    quote: Quoter = no_quotes,
    context_alpha: float = 0.0,
    choice_margin: float | None = None,
) -> Report:
    """Evaluate ``backend``'s adapter on ``document``'s probes, prompts and sections, the retention and dialogue
    probes as ``route`` serves (:attr:`~learnerd.eval.probes.base.ProbeContext.route`; default: the adapter
    alone), the dialogue's turns under the retrieved examples ``quote`` gives (default: none), decoded with
    context-aware decoding at ``context_alpha`` (0: off) where the base answers a quoted turn, and carrying the quoted
    command chosen at ``choice_margin`` (None: off). ``progress`` is called with a description after each of the
    :func:`total_steps` steps.

    Raises:
        DocumentError: an instruction section of ``document`` breaks the Q/A grammar.
        EvaluationCancelled: ``backend.cancel`` was set; the evaluation stopped at its next batch.
    """
    options = options or EvalOptions()
    started_at, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    probes: list[ProbeResult]
    null_stats: dict[str, dict[str, float]] = {}
    try:
        backend.check_finite()
    except NonFiniteLogitsError as exc:
        probes = [errored("preflight", "preflight", exc, t0)]
    else:
        inputs = document_inputs(
            document, backend.tokenizer, max_prompts=options.max_prompts, harvest_tag=options.harvest_tag
        )
        ctx = ProbeContext(
            backend,
            inputs,
            options,
            progress=progress or (lambda description: None),
            route=route,
            quote=quote,
            context_alpha=context_alpha,
            choice_margin=choice_margin,
        )
        probes = []
        for probe in PROBES:
            outcome = probe.run(ctx)
            probes.extend(outcome if isinstance(outcome, list) else [outcome])
            ctx.step(probe.KIND)
        null_stats = ctx.null_stats
    return Report(
        sway_version=SWAY_VERSION,
        base_model_id=base_model_id,
        adapter_id=adapter_id,
        started_at=started_at,
        finished_at=dt.datetime.now(dt.UTC),
        wall_seconds=time.perf_counter() - t0,
        score=compute_score(probes),
        probes=tuple(probes),
        spec_path=str(document.path or ""),
        determinism={
            "class": "best_effort",
            "seed": options.null_seed_base,
            "notes": ["greedy decoding; seeded noise adapters"],
        },
        backend_stats={"forward_passes": backend.forward_passes},
        null_stats=null_stats,
        extra={"generator": f"learnerd {__version__}", **(extra or {})},
    )


def evaluate_version(
    document: Document,
    version: AdapterVersion,
    base: BaseModelRef,
    *,
    options: EvalOptions | None = None,
    progress: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    placement: Placement | None = None,
    answer_cache_dir: Path | None = None,
    embedder: Embedder | None = None,
    rag_k: int = 0,
    context_alpha: float = 0.0,
    choice_margin: float | None = None,
) -> Report:
    """Load ``base`` (on ``placement``; default CPU float32) with ``version``'s adapter and :func:`evaluate` it on
    ``document``; setting ``cancel`` (from another thread) stops it at the next batch. With ``embedder`` (the serving
    one) the items are scored as ``[serve] routing = "similarity"`` serves them, routed by the version's own threshold
    (:func:`learnerd.ml.router.text_router`), and the dialogue's turns are answered under the ``rag_k`` (``[serve]
    rag_k``) learned examples the endpoint quotes with them, those the base answers decoded with context-aware decoding
    at ``context_alpha`` (the α the endpoint applies: ``ServeConfig.served_context_alpha``), carrying the quoted
    command chosen at ``choice_margin`` (``ServeConfig.served_choice_margin``); without, by the adapter alone
    (``"always-adapter"``); the report's ``learnerd.routing`` says which, its ``learnerd.context_alpha`` the α and its
    ``learnerd.choice_margin`` the margin. With ``answer_cache_dir`` (the model cache), the base's answers to
    ``answer_retention``'s pool and every log-likelihood it scores are kept there for the next evaluation on this base
    (:mod:`learnerd.eval.base_answers`, :mod:`learnerd.eval.base_logprobs`). A version that trained too little
    (:func:`learnerd.ml.undertrained.undertrained_finding` on its metadata's steps, final loss and vocabulary size) gets
    an ``undertrained: ...`` finding first.

    Raises:
        BaseModelError: the base cannot be loaded.
        DocumentError: as :func:`evaluate`.
        EmbedderError: the embedder failed.
        EvaluationCancelled: ``cancel`` was set.
    """
    backend = DifferentialBackend.load(base, version, placement, cancel=cancel, answer_cache_dir=answer_cache_dir)
    backend.check_cancelled()
    router = text_router(document, version, embedder, rag_k) if embedder is not None else None
    extra = {
        "learnerd": {
            "dlm_id": document.frontmatter.dlm_id,
            "adapter_version": version.number,
            "base_model_identity": base.identity,
            "routing": router.describe() if router is not None else {"mode": "always-adapter"},
            "context_alpha": context_alpha if router is not None else 0.0,
            "choice_margin": choice_margin if router is not None else None,
        }
    }
    report = evaluate(
        backend,
        document,
        base_model_id=document.frontmatter.base_model,
        adapter_id=str(version.path),
        options=options,
        extra=extra,
        progress=progress,
        route=router or adapter_alone,
        quote=router.quoted if router is not None else no_quotes,
        context_alpha=context_alpha if router is not None else 0.0,
        choice_margin=choice_margin if router is not None else None,
    )
    meta = version.metadata()
    reason = undertrained_finding(meta.steps, meta.final_loss, backend.vocab_size)
    if reason is None:
        return report
    return dataclasses.replace(
        report, score=dataclasses.replace(report.score, findings=(reason, *report.score.findings))
    )
