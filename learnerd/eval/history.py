"""Where a version's report lives, and the history of reports over a document's adapter versions.

A report is written beside the adapter version it evaluated: ``<adapters>/<doc_key>/versions/vNNNN/
eval.json`` (:func:`report_path`), atomically. A document's key in the adapter store is its frontmatter
``dlm_id`` (:func:`adapter_key`: dlm keys its own store the same way), so renaming or moving the file
keeps its adapters. :func:`current_versions` finds the documents that have a current (promoted) adapter,
:func:`adapter_documents` those with any version; :func:`history` reads every version's report back with the
promotion gate's verdict, :func:`last_report` the newest; :func:`plot_history` draws the probe pass rate,
overall score and retention per version — and, given them, each version's training loss per step (from its
``manifest.json``) — into a PNG (matplotlib, Agg backend).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from learnerd.eval.report import Report, ReportError, load_report
from learnerd.eval.score import recall_counts
from learnerd.store.adapters import AdapterStore, AdapterStoreError, AdapterVersion
from learnerd.store.atomic import atomic_write_bytes
from learnerd.store.dlm import Document, DocumentError, read_document

log = structlog.get_logger(__name__)

REPORT_FILE = "eval.json"
RETENTION_PROBES = ("answer_retention", "calibration_drift")
"""The retention probes whose raw value a version's history shows: the fraction of the base's right answers
kept (``answer_retention``) and the fraction of items whose calibration regressed (``calibration_drift``)."""


def adapter_key(document: Document) -> str:
    """The document's key in the adapter store: its ``dlm_id``."""
    return document.frontmatter.dlm_id


def report_path(version: AdapterVersion) -> Path:
    """``<version dir>/eval.json``."""
    return version.path / REPORT_FILE


def current_versions(store: AdapterStore, docs_roots: Sequence[Path]) -> dict[Path, AdapterVersion]:
    """Every ``.dlm`` document under the directories ``docs_roots`` that has a current (promoted) adapter
    version → that version, in path order. A document that cannot be read or parsed, or whose store entry is
    unreadable, is logged and left out."""
    return _documents(store, docs_roots, store.current)


def adapter_documents(store: AdapterStore, docs_roots: Sequence[Path]) -> dict[Path, AdapterVersion]:
    """As :func:`current_versions`, for every document with an adapter version, promoted or not → its newest."""
    return _documents(store, docs_roots, store.latest)


def _documents(
    store: AdapterStore, docs_roots: Sequence[Path], lookup: Callable[[str], AdapterVersion | None]
) -> dict[Path, AdapterVersion]:
    found = {}
    for directory in docs_roots:
        for path in sorted(Path(directory).rglob("*.dlm")) if Path(directory).is_dir() else []:
            try:
                version = lookup(adapter_key(read_document(path)))
            except (DocumentError, AdapterStoreError, OSError) as exc:
                log.info("no adapter looked up for a document", path=str(path), error=str(exc))
                continue
            if version is not None:
                found[path] = version
    return found


def version_reports(
    store: AdapterStore, doc_key: str, *, newest_first: bool = False
) -> Iterator[tuple[AdapterVersion, Report]]:
    """Every version of ``doc_key`` that has a readable report, with it (oldest first unless
    ``newest_first``). An unreadable report is logged and skipped."""
    versions = store.list_versions(doc_key)
    for version in reversed(versions) if newest_first else versions:
        path = report_path(version)
        if not path.exists():
            continue
        try:
            yield version, load_report(path)
        except ReportError as exc:
            log.warning("unreadable evaluation report skipped", path=str(path), error=str(exc))


def last_report(store: AdapterStore, doc_key: str) -> tuple[AdapterVersion, Report] | None:
    """The newest version of ``doc_key`` that has a readable report, with it; None when none has."""
    return next(version_reports(store, doc_key, newest_first=True), None)


def retention_of(report: Report | None) -> dict[str, float]:
    """The raw values of the :data:`RETENTION_PROBES` ``report`` measured (a skipped or errored probe has none)."""
    if report is None:
        return {}
    return {p.name: float(p.raw) for p in report.probes if p.name in RETENTION_PROBES and p.raw is not None}


@dataclass(frozen=True)
class HistoryPoint:
    """One evaluated version: recall ``passed`` of ``judged`` probes (``pass_rate`` None when none was
    judged), the overall ``score`` and its ``band``, verdict counts, when the evaluation finished,
    ``retention`` (:func:`retention_of`: only the retention probes that measured something), and the
    promotion gate's ``gate`` outcome (``"promoted"``, ``"rejected"``, or None: not decided — a version of an
    older learnerd, or superseded) with its ``gate_reasons``; ``current``: it is the version served now."""

    version: int
    name: str
    passed: int
    judged: int
    score: float
    band: str
    verdicts: dict[str, int]
    finished_at: str
    retention: dict[str, float] | None = None
    gate: str | None = None
    gate_reasons: tuple[str, ...] = ()
    current: bool = False

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.judged if self.judged else None


def history(store: AdapterStore, doc_key: str) -> list[HistoryPoint]:
    """The history of ``doc_key``'s evaluated versions, oldest first."""
    points = []
    current = store.current(doc_key)
    for version, report in version_reports(store, doc_key):
        passed, judged = recall_counts(report.probes)
        try:
            verdict = version.verdict()
        except AdapterStoreError as exc:
            log.warning("unreadable gate verdict skipped", version=version.name, error=str(exc))
            verdict = None
        points.append(
            HistoryPoint(
                version=version.number,
                name=version.name,
                passed=passed,
                judged=judged,
                score=report.score.overall,
                band=report.score.band,
                verdicts=dict(Counter(p.verdict.value for p in report.probes)),
                finished_at=report.finished_at.isoformat(timespec="seconds"),
                retention=retention_of(report),
                gate=verdict.outcome if verdict is not None else None,
                gate_reasons=verdict.reasons if verdict is not None else (),
                current=current is not None and current.number == version.number,
            )
        )
    return points


def plot_history(
    points: Sequence[HistoryPoint],
    path: str | Path,
    *,
    title: str,
    losses: Mapping[str, Sequence[float]] | None = None,
) -> None:
    """Plot probe pass rate, overall score and the retention fractions where measured (all in [0, 1]) per
    adapter version into a PNG at ``path``, written atomically; with ``losses`` (version name → its training
    loss per optimizer step, nats per token: the manifest's ``losses``), a second panel draws each version's
    loss curve.

    Raises:
        ValueError: no points.
        OSError: ``path`` cannot be written.
    """
    if not points:
        raise ValueError("no evaluated version to plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curves = {name: list(values) for name, values in (losses or {}).items() if values}
    fig = Figure(figsize=(7, 7.5 if curves else 4), dpi=100)
    FigureCanvasAgg(fig)  # the Agg backend, without touching pyplot's global state
    ax = fig.add_subplot(2, 1, 1) if curves else fig.add_subplot()
    x = [p.version for p in points]
    rates = [p.pass_rate for p in points]
    ax.plot(x, [r if r is not None else float("nan") for r in rates], marker="o", label="probe pass rate")
    ax.plot(x, [p.score for p in points], marker="s", linestyle="--", label="overall score")
    for probe, label, marker in (
        ("answer_retention", "answers kept (answer_retention)", "^"),
        ("calibration_drift", "items regressed (calibration_drift)", "v"),
    ):
        values = [(p.retention or {}).get(probe, float("nan")) for p in points]
        if any(v == v for v in values):  # measured for at least one version
            ax.plot(x, values, marker=marker, linestyle=":", label=label)
    for p, r in zip(points, rates, strict=True):
        if r is not None:
            ax.annotate(
                f"{p.passed}/{p.judged}",
                (p.version, r),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=8,
            )
    ax.set_xticks(x, [p.name for p in points], rotation=45 if len(x) > 8 else 0)
    ax.set_ylim(-0.05, 1.1)
    ax.set_xlabel("adapter version")
    ax.set_ylabel("fraction")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if curves:
        loss_ax = fig.add_subplot(2, 1, 2)
        for name, values in curves.items():
            loss_ax.plot(range(1, len(values) + 1), values, linewidth=1, label=name)
        loss_ax.set_xlabel("optimizer step")
        loss_ax.set_ylabel("training loss (nats/token)")
        loss_ax.set_title("training loss per version")
        loss_ax.grid(alpha=0.3)
        loss_ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
