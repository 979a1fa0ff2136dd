"""One-screen terminal views (rich) of a report and of a document's evaluation history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from learnerd.eval.history import HistoryPoint
from learnerd.eval.probes.recall import KIND as RECALL
from learnerd.eval.report import ProbeResult, Report, Verdict
from learnerd.eval.score import explain_band, recall_counts
from learnerd.store.suggestions import OUTCOMES

STYLE = {
    Verdict.PASS: "green",
    Verdict.FAIL: "red",
    Verdict.WARN: "yellow",
    Verdict.SKIP: "dim",
    Verdict.ERROR: "magenta",
}
MAX_FAILED_RECALL_ROWS = 5


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _verdict(v: Verdict) -> str:
    return f"[{STYLE[v]}]{v.value}[/]"


def render_report(report: Report, console: Console, *, title: str = "") -> None:
    """A table of the probes — the recall probes folded into one row plus their worst failures — then
    the overall score with its band explained (:func:`~learnerd.eval.score.explain_band`) and the findings."""
    table = Table(title=title or f"evaluation of {report.adapter_id}", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("probe", "left"), ("kind", "left"), ("verdict", "left"),
        ("score", "right"), ("raw", "right"), ("z", "right"), ("message", "left"))  # fmt: skip
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold", no_wrap=col in ("verdict", "score", "raw", "z"))
    recall = [p for p in report.probes if p.kind == RECALL]
    for p in report.probes:
        if p.kind != RECALL:
            table.add_row(
                p.name,
                p.kind,
                _verdict(p.verdict),
                _num(p.score),
                _num(p.raw, ".4g"),
                _num(p.z_score, "+.1f"),
                p.message,
            )
        elif p is recall[0]:
            _recall_rows(table, recall)
    console.print(table)
    s = report.score
    band = escape(explain_band(s, report.probes))
    console.print(f"overall score [bold]{s.overall:.3f}[/], {band}, in {report.wall_seconds:.1f} s")
    for finding in s.findings:
        console.print(f"  - {finding}", markup=False)


def _recall_rows(table: Table, recall: Sequence[ProbeResult]) -> None:
    passed, judged = recall_counts(recall)
    if not judged:
        p = recall[0]
        table.add_row(p.name, p.kind, _verdict(p.verdict), "-", "-", "-", p.message)
        return
    scores = [p.score for p in recall if p.score is not None]
    verdict = Verdict.PASS if passed == judged else Verdict.FAIL
    mean = sum(scores) / len(scores) if scores else None
    table.add_row(
        f"probe_recall ×{len(recall)}",
        RECALL,
        _verdict(verdict),
        _num(mean),
        "-",
        "-",
        f"{passed}/{judged} answered as the document says",
    )
    failed = sorted((p for p in recall if p.verdict != Verdict.PASS), key=lambda p: p.score or 0.0)
    for p in failed[:MAX_FAILED_RECALL_ROWS]:
        table.add_row(f"  {p.name}", "", _verdict(p.verdict), _num(p.score), _num(p.raw, ".3f"), "-", p.message)
    if len(failed) > MAX_FAILED_RECALL_ROWS:
        table.add_row(f"  … {len(failed) - MAX_FAILED_RECALL_ROWS} more", "", "", "", "", "", "")


SUGGESTION_COLUMN = "suggested / accepted / edited / failed"


def render_history(
    points: Sequence[HistoryPoint],
    console: Console,
    *,
    title: str,
    suggestions: Mapping[str, Mapping[str, int]] | None = None,
) -> None:
    """One row per evaluated adapter version: probe pass rate, beside it what became of the version's served
    answers (``suggestions``: version name → outcome → count, :func:`learnerd.store.suggestions.counts`;
    ``-`` for a version that served none), overall score and band, verdict counts, the promotion gate's outcome
    (``current`` marks the version served now); then, per rejected version, why."""
    suggestions = suggestions or {}
    table = Table(title=title, title_justify="left")
    columns = (
        "version",
        "probe pass rate",
        SUGGESTION_COLUMN,
        "score",
        "band",
        "pass / fail / warn / skip / error",
        "gate",
        "evaluated",
    )
    for col in columns:
        table.add_column(col, justify="right" if col in ("probe pass rate", SUGGESTION_COLUMN, "score") else "left")
    for p in points:
        rate = "-" if p.pass_rate is None else f"{p.pass_rate:.0%} ({p.passed}/{p.judged})"
        counts = " / ".join(str(p.verdicts.get(v.value, 0)) for v in Verdict)
        served = suggestions.get(p.name)
        outcomes = " / ".join(str(served.get(o, 0)) for o in OUTCOMES) if served else "-"
        gate = (p.gate or "-") + (" (current)" if p.current else "")
        table.add_row(p.name, rate, outcomes, f"{p.score:.3f}", p.band, counts, gate, p.finished_at)
    console.print(table)
    for p in points:
        if p.gate == "rejected":
            console.print(f"{p.name} rejected: " + "; ".join(p.gate_reasons), markup=False)
