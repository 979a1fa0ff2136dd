"""What each adapter version of a document learned, how it trained, how it scored: ``learnerd versions``.

One :class:`VersionRow` per committed version, read from the files beside its adapter: ``metadata.json``
(time, steps, loss; :class:`~learnerd.store.adapters.AdapterMetadata`), ``manifest.json`` (the sections and
examples added, removed and replayed against the version before; :mod:`learnerd.store.manifest`),
``eval.json`` (the overall score, and retention where it was measured: ``answer_retention``'s kept fraction
and ``calibration_drift``'s regressed fraction, :mod:`learnerd.eval.probes`) and ``verdict.json`` when a
promotion gate wrote one (whether the version was promoted or rejected, and why). A version committed before
manifests existed shows no added/removed counts (None); one never evaluated, no score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import structlog

from learnerd.eval.history import report_path, retention_of
from learnerd.eval.report import Report, ReportError, load_report
from learnerd.store.adapters import AdapterStore, AdapterStoreError, AdapterVersion
from learnerd.store.manifest import Manifest, ManifestError, SectionOrigin, read_manifest

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class VersionRow:
    """One adapter version: ``created_at`` ISO 8601 UTC; ``mode`` fresh or incremental; losses in nats per
    token; ``added`` / ``removed`` / ``replayed`` sections and ``examples_added`` / ``examples_removed`` learned
    examples against the version before (None without a manifest); ``score`` the evaluation's overall score in
    [0, 1] (None: not evaluated); ``retention``: probe name → its raw value (``answer_retention``: fraction of
    the base's right answers kept; ``calibration_drift``: fraction of items regressed), only those measured;
    ``status``: ``served`` (the current version), ``promoted`` / ``rejected`` (the promotion gate's verdict,
    :class:`~learnerd.store.adapters.GateVerdict`), ``candidate`` (awaiting its verdict) or ``—``; ``reason``: why
    the gate rejected it (``""`` when promoted or undecided)."""

    version: int
    name: str
    created_at: str
    mode: str
    steps: int
    start_loss: float
    final_loss: float
    added: int | None
    removed: int | None
    replayed: int | None
    examples_added: int | None
    examples_removed: int | None
    score: float | None
    retention: dict[str, float]
    status: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_verdict(version: AdapterVersion) -> tuple[str, str] | None:
    """``(outcome, reasons)`` of the promotion gate's verdict on ``version`` (:meth:`AdapterVersion.verdict`:
    ``promoted`` or ``rejected``, the reasons joined by ``"; "``), or None when it has none or it is unreadable
    (logged)."""
    try:
        verdict = version.verdict()
    except AdapterStoreError as exc:
        log.warning("unreadable verdict skipped", path=str(version.path), error=str(exc))
        return None
    return None if verdict is None else (verdict.outcome, "; ".join(verdict.reasons))


def manifest_of(version: AdapterVersion) -> Manifest | None:
    """The version's manifest, or None when it has none or it is unreadable (logged)."""
    try:
        return read_manifest(version.path, version.number)
    except ManifestError as exc:
        log.warning("unreadable manifest skipped", path=str(version.path), error=str(exc))
        return None


def _report_of(version: AdapterVersion) -> Report | None:
    path = report_path(version)
    if not path.exists():
        return None
    try:
        return load_report(path)
    except ReportError as exc:
        log.warning("unreadable evaluation report skipped", path=str(path), error=str(exc))
        return None


def version_rows(store: AdapterStore, doc_key: str) -> list[VersionRow]:
    """One row per committed version of ``doc_key``, oldest first (empty for a document without adapters).

    Raises:
        AdapterStoreError: a version's ``metadata.json`` is unreadable.
    """
    versions = store.list_versions(doc_key)
    current = store.current(doc_key) if versions else None
    rows = []
    for version in versions:
        meta, manifest, report = version.metadata(), manifest_of(version), _report_of(version)
        verdict = read_verdict(version)
        if current is not None and version.number == current.number:
            status, reason = "served", ""
        elif verdict is not None:
            status, reason = verdict
        else:  # the newest, awaiting its evaluation; or a version of a learnerd before the gate
            status, reason = ("candidate" if current is None or version.number > current.number else "—"), ""
        added = manifest.added_origins() if manifest is not None else None
        rows.append(
            VersionRow(
                version=version.number,
                name=version.name,
                created_at=meta.created_at,
                mode=str(meta.extra.get("mode", "—")),
                steps=meta.steps,
                start_loss=meta.start_loss,
                final_loss=meta.final_loss,
                added=len(added) if added is not None else None,
                removed=len(manifest.removed) if manifest is not None else None,
                replayed=len(manifest.replayed) if manifest is not None else None,
                examples_added=sum(1 for s in added if s.example_id) if added is not None else None,
                examples_removed=sum(1 for s in manifest.removed if s.example_id) if manifest is not None else None,
                score=report.score.overall if report is not None else None,
                retention=retention_of(report),
                status=status,
                reason=reason,
            )
        )
    return rows


@dataclass(frozen=True)
class VersionChanges:
    """What one version changed against the version before it: the sections (and the examples they hold, with
    log file, line and time) ``added``, ``removed`` and ``replayed``. ``manifest`` None: the version has none."""

    version: AdapterVersion
    manifest: Manifest | None
    added: tuple[SectionOrigin, ...]
    removed: tuple[SectionOrigin, ...]
    replayed: tuple[SectionOrigin, ...]

    def to_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "version": self.version.name,
            "previous_version": m.previous_version if m is not None else None,
            "mode": m.mode if m is not None else None,
            "has_manifest": m is not None,
            "added": [asdict(s) for s in self.added],
            "removed": [asdict(s) for s in self.removed],
            "replayed": [asdict(s) for s in self.replayed],
        }


def version_changes(store: AdapterStore, doc_key: str, ref: str | int) -> VersionChanges:
    """What version ``ref`` (``vN``, ``N``, ``current``) of ``doc_key`` added, removed and replayed.

    Raises:
        AdapterStoreError: no such version (the message lists those that exist).
    """
    version = store.resolve(doc_key, ref)
    manifest = manifest_of(version)
    if manifest is None:
        return VersionChanges(version, None, (), (), ())
    replayed = tuple(s for i in manifest.replayed if (s := manifest.section(i)) is not None)
    return VersionChanges(version, manifest, tuple(manifest.added_origins()), manifest.removed, replayed)


def versions_training(store: AdapterStore, doc_key: str, example_ids: set[str]) -> dict[str, list[str]]:
    """Example id → the names of ``doc_key``'s versions whose manifest says they embody it (oldest first), for
    each of ``example_ids`` (an id no version trained on maps to an empty list)."""
    out: dict[str, list[str]] = {i: [] for i in example_ids}
    try:
        versions = store.list_versions(doc_key)
    except AdapterStoreError as exc:
        log.warning("adapter versions not listed", doc_key=doc_key, error=str(exc))
        return out
    for version in versions:
        manifest = manifest_of(version)
        if manifest is None:
            continue
        for example_id in manifest.example_ids() & example_ids:
            out[example_id].append(version.name)
    return out


def loss_curves(store: AdapterStore, doc_key: str) -> dict[str, tuple[float, ...]]:
    """Version name → its training loss per optimizer step (nats per token), for every version of ``doc_key``
    whose manifest recorded them, oldest first."""
    curves = {}
    for version in store.list_versions(doc_key):
        manifest = manifest_of(version)
        if manifest is not None and manifest.losses:
            curves[version.name] = manifest.losses
    return curves
