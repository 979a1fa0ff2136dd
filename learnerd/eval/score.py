"""The composite score of a report, after sway's ``suite/score.py``.

Each probe falls in a category (:data:`~learnerd.eval.probes.base.CATEGORY`); a category's value is the mean of
its probes' scores weighted by ``evidence.weight`` (default 1), skipped and errored probes left out; the
overall score is the mean of the categories that have a scored probe, weighted by :data:`DEFAULT_WEIGHTS`
(sway's defaults; ``baseline`` weighs 0). Bands: below 0.3 ``noise``, below 0.6 ``partial``, up to 0.85
``healthy``, above ``suspicious`` (sway's: possibly memorised rather than learned).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from learnerd.eval.probes.base import CATEGORY
from learnerd.eval.probes.recall import KIND as RECALL
from learnerd.eval.report import ProbeResult, Score, Verdict

DEFAULT_WEIGHTS: dict[str, float] = {
    "adherence": 0.30,
    "attribution": 0.35,
    "calibration": 0.20,
    "ablation": 0.15,
    "baseline": 0.0,
}
MAX_FINDINGS = 5


def band(overall: float) -> str:
    """sway's band of an overall score in [0, 1]."""
    if overall < 0.3:
        return "noise"
    if overall < 0.6:
        return "partial"
    return "healthy" if overall <= 0.85 else "suspicious"


def recall_counts(probes: Iterable[ProbeResult]) -> tuple[int, int]:
    """``(passed, judged)`` over the ``probe_recall`` results that passed or failed."""
    verdicts = [p.verdict for p in probes if p.kind == RECALL and p.verdict in (Verdict.PASS, Verdict.FAIL)]
    return sum(v == Verdict.PASS for v in verdicts), len(verdicts)


def compute_score(
    probes: Sequence[ProbeResult], *, weights: dict[str, float] | None = None, findings: Iterable[str] = ()
) -> Score:
    """The :class:`~learnerd.eval.report.Score` of ``probes``; ``findings`` are put first."""
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    buckets: dict[str, list[tuple[float, float]]] = {}
    for p in probes:
        if p.verdict in (Verdict.SKIP, Verdict.ERROR) or p.score is None:
            continue
        w = p.evidence.get("weight", 1.0)
        w = float(w) if isinstance(w, int | float) and not isinstance(w, bool) else 1.0
        buckets.setdefault(CATEGORY.get(p.kind, "adherence"), []).append((max(w, 0.0), p.score))
    components = {}
    for category, scored in buckets.items():
        total = sum(w for w, _ in scored)
        components[category] = sum(w * s for w, s in scored) / total if total > 0 else 0.0
    active = {c: weights.get(c, 0.0) for c in components if weights.get(c, 0.0) > 0}
    total = sum(active.values())
    overall = sum(w * components[c] for c, w in active.items()) / total if total > 0 else 0.0
    notes = list(findings)
    passed, judged = recall_counts(probes)
    if judged:
        notes.append(f"probe recall {passed}/{judged} ({passed / judged:.0%})")
    notes += [
        f"{p.name} ({p.kind}) failed: {p.message}" for p in probes if p.verdict == Verdict.FAIL and p.kind != RECALL
    ][:2]
    errors = sum(p.verdict == Verdict.ERROR for p in probes)
    if errors:
        notes.append(f"{errors} probe(s) errored; see their messages")
    return Score(
        overall=overall,
        band=band(overall),
        components=components,
        weights=weights,
        findings=tuple(notes[:MAX_FINDINGS]),
    )
