"""One training cycle of one document: decide what to train, train it in a child process, commit the adapter
as the document's next version — a candidate, which the evaluation's promotion gate promotes or rejects
(docs/evaluation.md). Called by ``learnerd train`` and by the training reconciler.

What a cycle trains (:func:`plan_cycle`), given the document's rows now and its current (promoted) adapter —
never a rejected candidate:

* **none** — the row section ids are those the current adapter was trained on (a section's id is a hash of
  its content, so an edit is a removal plus a new section);
* **fresh** — a new adapter on every row: no adapter yet, the base model or the adapter's shape changed, rows
  were removed (LoRA cannot subtract what it learned), or the caller asked for it;
* **incremental** — resume from the current adapter and train the new rows, rehearsing the unchanged ones on a
  budget of ``k = min(unchanged, max(min_rows, ceil(ratio × new)))`` rows an epoch (dlm's replay budget
  ``k = max(32, 2 × |new|)`` by default), every unchanged row in turn (:func:`learnerd.training.lora.train_lora`),
  rather than dlm's ``k`` drawn rows alone.

A plan that would train exactly what the newest candidate was trained on (same rows, ``training`` block and
base model) trains nothing instead (:func:`already_tried`): it would give the same adapter.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.metadata
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import structlog

from learnerd.ml.base_model import BaseModelRef
from learnerd.ml.embedders import Embedder
from learnerd.ml.router import routing_entry
from learnerd.ml.rows import TrainingRow, system_prompt
from learnerd.store.adapters import AdapterMetadata, AdapterStore, AdapterVersion
from learnerd.store.dlm import TrainingConfig
from learnerd.store.manifest import (
    Manifest,
    ManifestError,
    SectionOrigin,
    read_manifest,
    sections_with_rows,
    write_manifest,
)
from learnerd.training.checkpoint import CHECKPOINT_DIR, DEFAULT_EVERY_S, remove_checkpoint
from learnerd.training.ingredients.replay import cache_path, replay_prompts
from learnerd.training.lora import PhaseEvent, ProgressEvent, TrainingResult
from learnerd.training.recipes import DocumentTraining, undertrained_reason
from learnerd.training.runner import WarmSpare, run_training
from learnerd.training.worker import TrainingRequest

log = structlog.get_logger(__name__)

CycleMode = Literal["none", "fresh", "incremental"]


@dataclass(frozen=True)
class ReplayPolicy:
    """How many unchanged rows an incremental cycle replays (see the module docstring)."""

    ratio: float = 2.0
    min_rows: int = 32

    def __post_init__(self) -> None:
        if not (self.ratio >= 0 and math.isfinite(self.ratio)) or self.min_rows < 0:
            raise ValueError("replay: need ratio >= 0 (finite) and min_rows >= 0")


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle will train: ``rows`` (new, then replayed), resuming from ``parent`` when incremental.

    ``section_ids`` are the document's sections with rows, in document order; the adapter committed
    from this plan records them as what it embodies. ``added_section_ids`` / ``removed_section_ids`` compare
    them with ``previous`` (the current version when the cycle was planned, whether resumed from or not);
    ``new_section_ids`` are those trained as new (all of them in a fresh cycle); ``replay_section_ids`` the
    unchanged ones rehearsed, ``rehearsal_per_epoch`` of their rows an epoch (0: all of them every epoch).
    """

    mode: CycleMode
    reason: str
    rows: tuple[TrainingRow, ...]
    section_ids: tuple[str, ...]
    new_section_ids: tuple[str, ...]
    replay_section_ids: tuple[str, ...]
    removed_section_ids: tuple[str, ...]
    parent: AdapterVersion | None
    added_section_ids: tuple[str, ...] = ()
    previous: AdapterVersion | None = None
    rehearsal_per_epoch: int = 0

    def training_rows(self) -> tuple[tuple[TrainingRow, ...], tuple[TrainingRow, ...]]:
        """``rows`` split into those every epoch trains and those rehearsed ``rehearsal_per_epoch`` an epoch
        (none when every row is trained every epoch)."""
        if not self.rehearsal_per_epoch:
            return self.rows, ()
        rehearsed = set(self.replay_section_ids)
        return (
            tuple(r for r in self.rows if r.section_id not in rehearsed),
            tuple(r for r in self.rows if r.section_id in rehearsed),
        )


@dataclass(frozen=True)
class CycleOutcome:
    """The plan, and — unless the plan was ``none`` — the committed version and the training result;
    ``undertrained``: the ``undertrained: <cause>; <fix>`` line when the cycle trained too little
    (:func:`learnerd.training.recipes.undertrained_reason`), else None."""

    plan: CyclePlan
    version: AdapterVersion | None
    result: TrainingResult | None
    undertrained: str | None = None


def plan_cycle(
    rows: Sequence[TrainingRow],
    config: TrainingConfig,
    base: BaseModelRef,
    current: AdapterVersion | None,
    *,
    replay: ReplayPolicy | None = None,
    fresh: bool = False,
) -> CyclePlan:
    """Decide what the next cycle trains (pure: reads only ``current``'s metadata).

    A section may give several rows (an instruction section gives one per Q/A pair); the delta is
    per section, the replay budget counts rows. A row repeated exactly (a duplicated section) counts once.

    Raises:
        AdapterStoreError: ``current``'s metadata is unreadable.
    """
    replay = replay or ReplayPolicy()
    unique = list(dict.fromkeys(rows))
    ids = tuple(dict.fromkeys(r.section_id for r in unique))
    meta = current.metadata() if current is not None else None
    previous = set(meta.section_ids) if meta is not None else set()
    new = tuple(i for i in ids if i not in previous)
    removed = tuple(sorted(previous - set(ids)))

    def plan(
        mode: CycleMode,
        reason: str,
        train: Sequence[TrainingRow],
        replayed: Sequence[TrainingRow] = (),
        per_epoch: int = 0,
    ) -> CyclePlan:
        return CyclePlan(
            mode=mode,
            reason=reason,
            rows=(*train, *replayed),
            section_ids=ids,
            new_section_ids=new if mode != "fresh" else ids,
            replay_section_ids=tuple(dict.fromkeys(r.section_id for r in replayed)),
            removed_section_ids=removed,
            parent=current if mode == "incremental" else None,
            added_section_ids=new,
            previous=current,
            rehearsal_per_epoch=per_epoch,
        )

    if not ids:
        return plan("none", "the document has no training rows", ())
    if meta is None or current is None:
        return plan("fresh", "no adapter yet", unique)
    if fresh:
        return plan("fresh", "a fresh adapter was asked for", unique)
    if meta.base_model_identity != base.identity:
        return plan("fresh", f"the base model changed ({meta.base_model_identity} → {base.identity})", unique)
    old_shape = {k: meta.hyperparameters.get(k) for k in config.lora_shape()}
    if old_shape != config.lora_shape():
        return plan("fresh", "the adapter's shape changed (adapter, lora_r, lora_alpha or target_modules)", unique)
    if removed:
        return plan("fresh", f"{len(removed)} section(s) removed; retraining so the adapter forgets them", unique)
    if not new:
        return plan("none", f"the rows are unchanged since {current.name}", ())
    new_rows = [r for r in unique if r.section_id not in previous]
    unchanged = [r for r in unique if r.section_id in previous]
    k = min(len(unchanged), max(replay.min_rows, math.ceil(replay.ratio * len(new_rows))))
    per_epoch = k if k < len(unchanged) else 0  # 0: the budget covers them all, every epoch
    rehearsed = f"{len(unchanged)} rows rehearsed, {k} an epoch" if per_epoch else f"{k} rows replayed"
    reason = f"{len(new)} new section(s) ({len(new_rows)} rows), {rehearsed}"
    return plan("incremental", reason, new_rows, unchanged, per_epoch)


async def train_cycle(
    store: AdapterStore,
    doc_key: str,
    base: BaseModelRef,
    rows: Sequence[TrainingRow],
    config: TrainingConfig,
    *,
    replay: ReplayPolicy | None = None,
    fresh: bool = False,
    own_keys: frozenset[str] = frozenset(),
    num_threads: int | None = None,
    niceness: int = 0,
    device: str = "cpu",
    on_progress: Callable[[ProgressEvent], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    spare: WarmSpare | None = None,
    origins: Mapping[str, SectionOrigin] | None = None,
    replay_cache_dir: Path | None = None,
    checkpoint_every_s: float = DEFAULT_EVERY_S,
    routing_embedder: Embedder | None = None,
    on_phase: Callable[[PhaseEvent], None] | None = None,
) -> CycleOutcome:
    """Plan and run one cycle for ``doc_key``; commit the new adapter version as a candidate (not current),
    with its ``manifest.json`` (:mod:`learnerd.store.manifest`).

    Args:
        store: the adapter store; ``doc_key`` names the document in it.
        base: the resolved base model (``learnerd.ml.base_model.resolve_base_model``).
        rows: every training row of the document now.
        config: the document's ``training`` block.
        replay, fresh: see :func:`plan_cycle`; without ``fresh``, nothing is trained when the newest
            candidate was trained on the same rows (:func:`already_tried`).
        own_keys: the fields of ``config`` the document itself sets
            (:attr:`learnerd.training.recipes.DocumentTraining.own_keys`); the undertrained warning blames only these.
        num_threads: torch threads in the training process (None: the free cores, :mod:`learnerd.ml.threads`).
        niceness: added to the training process's nice value (0: unchanged).
        device: where the training process trains (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        on_progress, on_start, spare, on_phase: passed to :func:`learnerd.training.runner.run_training`.
        origins: where the document's sections came from, by section id
            (:func:`learnerd.store.manifest.section_origins`); a section without one is recorded as a person's.
        replay_cache_dir: where the base's general replay answers are cached (the model cache,
            ``<state_dir>/models``; :func:`learnerd.training.ingredients.replay.cache_path`); None: not cached.
        checkpoint_every_s: seconds of training between two checkpoints, kept in the document's adapter directory
            (``training-checkpoint/``, :mod:`learnerd.training.checkpoint`) until the version is committed: a cycle
            stopped part-way (a restart, a crash, a cancellation) goes on from its last one when the same
            training is asked for again.
        routing_embedder: the serving embedder; with it the manifest records the document's routing threshold
            (:func:`learnerd.ml.router.routing_entry` against the general replay prompts), without it none (the
            version routes with the default).

    Returns:
        the outcome; ``version`` is None when the plan was ``none`` (nothing to train).

    Raises:
        TrainingFailed: training failed (``permanent`` for bad input); nothing was committed.
        AdapterStoreError: the current version's or the candidate's metadata is unreadable.
        OSError: the manifest cannot be written; nothing was committed.
        Cancellation: the child is stopped, its partial output removed, ``current`` unchanged.
    """
    current = store.current(doc_key)
    plan = plan_cycle(rows, config, base, current, replay=replay, fresh=fresh)
    if plan.mode != "none" and not fresh:
        plan = already_tried(plan, store.candidate(doc_key), config, base) or plan
    if plan.mode == "none":
        return CycleOutcome(plan=plan, version=None, result=None)
    losses: list[float] = []

    def stepped(event: ProgressEvent) -> None:
        losses.append(event.loss)
        if on_progress is not None:
            on_progress(event)

    train_rows, rehearsal = plan.training_rows()
    checkpoint_dir = store.doc_dir(doc_key) / CHECKPOINT_DIR
    with store.stage(doc_key) as staging:
        request = TrainingRequest(
            base_model_path=str(base.path),
            output_dir=str(staging.path),
            rows=train_rows,
            rehearsal=rehearsal,
            rehearsal_per_epoch=plan.rehearsal_per_epoch,
            config=config,
            resume_from=str(plan.parent.path) if plan.parent is not None else None,
            num_threads=num_threads,
            niceness=niceness,
            device=device,
            replay_cache=str(cache_path(replay_cache_dir, base.identity, system_prompt(plan.rows)))
            if replay_cache_dir is not None
            else None,
            checkpoint_dir=str(checkpoint_dir),
            checkpoint_every_s=checkpoint_every_s,
        )
        result = await run_training(request, on_progress=stepped, on_start=on_start, spare=spare, on_phase=on_phase)
        metadata = AdapterMetadata(
            base_model=base.name,
            base_model_identity=base.identity,
            section_ids=plan.section_ids,
            new_section_ids=plan.new_section_ids,
            replay_section_ids=plan.replay_section_ids,
            parent_version=plan.parent.number if plan.parent is not None else None,
            steps=result.steps,
            start_loss=result.start_loss,
            final_loss=result.final_loss,
            tokens_trained=result.tokens_trained,
            seed=config.seed,
            hyperparameters=config.to_dict(),
            library_versions=library_versions(),
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            extra={
                "mode": plan.mode,
                "reason": plan.reason,
                "dropped_section_ids": list(result.dropped),
                "vocab_size": result.vocab_size,
                "resumed_at_step": result.resumed_at_step,
                "peak_rss_mb": result.peak_rss_mb,
            },
        )
        per_section = Counter(r.section_id for r in dict.fromkeys(rows))
        manifest = _manifest(doc_key, plan, metadata, result, losses, per_section, origins or {})
        routing = await anyio.to_thread.run_sync(routing_entry, rows, routing_embedder, replay_prompts())
        manifest = dataclasses.replace(manifest, routing=routing)
        await anyio.to_thread.run_sync(write_manifest, staging.path, manifest)
        training = DocumentTraining(config, base.builtin, own_keys)
        reason = undertrained_reason(
            result.steps, result.final_loss, result.vocab_size, training=training, rows=result.rows
        )
        if reason is not None:
            log.warning("training.undertrained", doc_key=doc_key, reason=reason)
        # fsync of a large adapter can take a while: keep it off the event loop.
        version = await anyio.to_thread.run_sync(store.commit, staging, metadata)
    await anyio.to_thread.run_sync(remove_checkpoint, checkpoint_dir)  # committed: nothing left to go on from
    return CycleOutcome(plan=plan, version=version, result=result, undertrained=reason)


def _manifest(
    doc_key: str,
    plan: CyclePlan,
    metadata: AdapterMetadata,
    result: TrainingResult,
    losses: Sequence[float],
    per_section: Mapping[str, int],
    origins: Mapping[str, SectionOrigin],
) -> Manifest:
    """The manifest of the version this cycle commits; removed sections keep the origin the previous version's
    manifest recorded (their example may be gone from the store by now)."""
    before = None
    if plan.previous is not None:
        try:
            before = read_manifest(plan.previous.path)
        except ManifestError as exc:  # removed sections are then recorded by id alone
            log.warning("manifest.unreadable", path=str(plan.previous.path), error=str(exc))
    removed = tuple(
        (before.section(i) if before is not None else None) or SectionOrigin(i) for i in plan.removed_section_ids
    )
    return Manifest(
        doc_key=doc_key,
        created_at=metadata.created_at,
        mode=plan.mode,
        reason=plan.reason,
        base_model=metadata.base_model,
        parent_version=metadata.parent_version,
        previous_version=plan.previous.number if plan.previous is not None else None,
        steps=result.steps,
        start_loss=result.start_loss,
        final_loss=result.final_loss,
        losses=tuple(losses),
        sections=sections_with_rows(plan.section_ids, per_section, origins),
        added=plan.added_section_ids,
        replayed=plan.replay_section_ids,
        removed=removed,
    )


def already_tried(
    plan: CyclePlan, candidate: AdapterVersion | None, config: TrainingConfig, base: BaseModelRef
) -> CyclePlan | None:
    """A plan of nothing to train when ``candidate`` (the newest committed version, newer than the current
    one) was trained on ``plan``'s section ids with the same ``training`` block and base model, else None.

    Raises:
        AdapterStoreError: ``candidate``'s metadata or verdict is unreadable.
    """
    if candidate is None:
        return None
    meta = candidate.metadata()
    if (
        tuple(meta.section_ids) != plan.section_ids
        or meta.base_model_identity != base.identity
        or meta.hyperparameters != json.loads(json.dumps(config.to_dict()))  # as metadata.json holds it
    ):
        return None
    verdict = candidate.verdict()
    if verdict is None:
        reason = f"the rows are unchanged since {candidate.name}, a candidate awaiting its evaluation"
    elif verdict.promoted:
        reason = f"the rows are unchanged since {candidate.name}, promoted"
    else:
        reason = (
            f"the rows are unchanged since {candidate.name}, which the promotion gate rejected "
            f"({'; '.join(verdict.reasons)}); change the document or train --fresh"
        )
    return CyclePlan("none", reason, (), plan.section_ids, (), (), (), plan.parent)


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries an adapter depends on (torch, transformers, peft, tokenizers)."""
    out = {}
    for name in ("torch", "transformers", "peft", "tokenizers"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out
