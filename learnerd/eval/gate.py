"""The promotion gate: does a candidate adapter version's evaluation earn it the place of the current one?

A training cycle commits a *candidate* (:meth:`~learnerd.store.adapters.AdapterStore.commit`); the evaluation
reconciler evaluates it and :func:`decide` compares its report with the current version's. The candidate is
promoted only when no check fails; a check that cannot be made (a probe skipped: nothing to measure) is
"not applicable" and does not block. The checks, with their ``[evaluation.gate]`` settings
(:class:`~learnerd.eval.settings.GateSettings`):

* ``evaluation_complete`` — no probe of the report errored. (An evaluation that raised, was cancelled or timed
  out wrote no report at all, so it never reaches the gate: nothing is promoted.)
* ``same_base`` — the candidate was evaluated on the base model the current version was (the reports'
  ``learnerd.base_model_identity``). A candidate on another base fails: none of its numbers compare with the
  served version's, and a base that knows nothing (the built-in tiny model) would switch retention off. A
  document moves to another base as a new adapter lineage (a new ``dlm_id``), whose first version is judged
  alone. When a report does not name its base identity (written before learnerd recorded it), the documents'
  ``base_model`` as written (the reports' ``base_model_id``) is compared instead: different ones fail, the same
  one is not applicable (it may name other weights). Not applicable for a document's first version.
* ``probe_recall`` — paired with the current version's report on the recall probes both judged (pass or
  fail; matched by name): ``b`` probes the current version passed now fail, ``c`` it failed now pass. With
  fewer than ``mcnemar_min_pairs`` changed probes (``b + c``) the candidate fails when ``b − c`` exceeds
  ``max_recall_regressions`` (default 1: at most one probe worse, net); from ``mcnemar_min_pairs`` on, McNemar's
  exact test decides (the one-sided binomial test of ``b`` successes in ``b + c`` trials at p = ½,
  ``scipy.stats.binomtest``; McNemar 1947, as NeMo Evaluator's regression gate): it fails when the p-value is
  below ``mcnemar_alpha``. Not applicable for a document's first version (no current one) or when no probe
  was judged in both reports.
* ``calibration_drift`` — the fraction of sway's general-knowledge items the candidate regressed (the probe's
  ``raw``) is at most ``max_fraction_regressed``. Not applicable when the probe was skipped (``dlm-sway`` not
  installed), and when the base model has no general knowledge to lose: ``answer_retention`` was skipped
  because the base answers none of its general questions right (the built-in random tiny model).
* ``answer_retention`` — of the ``n`` general questions the base answers right (the probe's ``base_right``),
  the candidate lost at most the count :func:`~learnerd.eval.retention_rule.retention_rule` allows for ``n``
  at ``retention_target_keep``, ``retention_floor_keep`` and ``retention_power``: a candidate that truly keeps
  the target passes, one that keeps only the floor fails, each with that probability (the detail says both, and
  when ``n`` is too small for both). With ``answer_retention_counts = "knowledge"`` only the answers it no
  longer gives when led along the base's own answer count as lost (the probe's ``lost_knowledge``; a report
  without it counts every lost answer). Not applicable when skipped (the base answers none).
* ``dialogue_answers`` — in the multi-turn probe's dialogues of the document's questions, every later turn
  answers at least ``min_dialogue_answers`` × as many exactly as turn 1 (the probe's ``answered_per_turn``; its
  KL half-life is reported, not gated). Not applicable when the probe was skipped, when turn 1 answered none,
  and, as ``calibration_drift``, when the base has no general knowledge (``answer_retention`` skipped: the
  built-in random tiny model, which only memorises its rows and holds no dialogue).

A document's first version is promoted when the other checks pass. Every check reads greedy answers and
log-likelihoods, none a z-score against the seeded noise adapters: the verdict does not depend on the
evaluation's seeds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from learnerd.eval.probes.calibration_drift import KIND as CALIBRATION_DRIFT
from learnerd.eval.probes.coherence import KIND as MULTI_TURN
from learnerd.eval.probes.recall import judged
from learnerd.eval.probes.retention import KIND as ANSWER_RETENTION
from learnerd.eval.probes.retention import lost_split
from learnerd.eval.report import ProbeResult, Report, Verdict
from learnerd.eval.settings import GateSettings
from learnerd.store.adapters import GateVerdict

CheckOutcome = Literal["pass", "fail", "not applicable"]


@dataclass(frozen=True)
class GateCheck:
    """One check of the gate: its ``name``, ``outcome`` and a one-line ``detail`` (the numbers it compared)."""

    name: str
    outcome: CheckOutcome
    detail: str


@dataclass(frozen=True)
class GateDecision:
    """Every check of one decision, and the version number compared with (None: the document's first)."""

    checks: tuple[GateCheck, ...]
    baseline: int | None

    @property
    def promoted(self) -> bool:
        """True when no check failed."""
        return all(c.outcome != "fail" for c in self.checks)

    @property
    def reasons(self) -> tuple[str, ...]:
        """``"<check>: <detail>"`` of each failed check."""
        return tuple(f"{c.name}: {c.detail}" for c in self.checks if c.outcome == "fail")

    def verdict(self, now: dt.datetime | None = None) -> GateVerdict:
        """The decision as the store records it (``verdict.json``), decided at ``now`` (default: now, UTC)."""
        when = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
        return GateVerdict(
            outcome="promoted" if self.promoted else "rejected",
            reasons=self.reasons,
            checks=tuple({"name": c.name, "outcome": c.outcome, "detail": c.detail} for c in self.checks),
            baseline=self.baseline,
            decided_at=when,
        )


def decide(
    candidate: Report, current: Report | None, settings: GateSettings, *, current_version: int | None = None
) -> GateDecision:
    """The gate's decision on the candidate's report ``candidate``, against the current version's report
    ``current`` (None: the document has no current version; ``current_version`` its number). See the module
    docstring for the checks."""
    checks = (
        _complete(candidate),
        _same_base(candidate, current),
        _recall(candidate, current, settings),
        _drift(candidate, settings),
        _retention(candidate, settings),
        _dialogue(candidate, settings),
    )
    return GateDecision(checks, current_version if current is not None else None)


def _probe(report: Report, kind: str) -> ProbeResult | None:
    return next((p for p in report.probes if p.kind == kind), None)


def _complete(report: Report) -> GateCheck:
    errored = [p.name for p in report.probes if p.verdict == Verdict.ERROR]
    if errored:
        shown = ", ".join(errored[:3]) + (f" and {len(errored) - 3} more" if len(errored) > 3 else "")
        return GateCheck("evaluation_complete", "fail", f"{len(errored)} probe(s) errored: {shown}")
    return GateCheck("evaluation_complete", "pass", f"{len(report.probes)} probe(s) ran without error")


def base_identity(report: Report) -> str | None:
    """The identity of the base model ``report`` was evaluated on (``extra.learnerd.base_model_identity``,
    :func:`learnerd.eval.suite.evaluate_version`); None when the report does not say."""
    identity = (report.extra.get("learnerd") or {}).get("base_model_identity")
    return identity if isinstance(identity, str) and identity else None


def _same_base(candidate: Report, current: Report | None) -> GateCheck:
    name = "same_base"
    if current is None:
        return GateCheck(name, "not applicable", "no current version to compare with (the document's first)")
    now, before = base_identity(candidate), base_identity(current)
    if now is None or before is None:
        if candidate.base_model_id != current.base_model_id:
            return GateCheck(
                name,
                "fail",
                f"the candidate's document names the base {candidate.base_model_id!r}, the current version's "
                f"{current.base_model_id!r}: to move the document to another base, give it a new dlm_id",
            )
        return GateCheck(name, "not applicable", "a report does not name its base model (written by an older learnerd)")
    if now != before:
        return GateCheck(
            name,
            "fail",
            f"the candidate was evaluated on {now}, the current version on {before}: its recall and retention do "
            "not compare with the served version's; to move the document to another base, give it a new dlm_id",
        )
    return GateCheck(name, "pass", f"both on {now}")


def _judged_recall(report: Report) -> dict[str, bool]:
    return {p.name: p.verdict == Verdict.PASS for p in judged(report)}


def _recall(candidate: Report, current: Report | None, settings: GateSettings) -> GateCheck:
    name = "probe_recall"
    if current is None:
        return GateCheck(name, "not applicable", "no current version to compare with (the document's first)")
    now, before = _judged_recall(candidate), _judged_recall(current)
    paired = sorted(now.keys() & before.keys())
    if not paired:
        return GateCheck(name, "not applicable", "no recall probe was judged in both evaluations")
    worse = sum(before[n] and not now[n] for n in paired)
    better = sum(now[n] and not before[n] for n in paired)
    counts = (
        f"{sum(now[n] for n in paired)}/{len(paired)} passed (current {sum(before[n] for n in paired)}/"
        f"{len(paired)}): {worse} newly fail, {better} newly pass"
    )
    if worse + better < settings.mcnemar_min_pairs:
        failed = worse - better > settings.max_recall_regressions
        bound = ">" if failed else "<="
        return GateCheck(
            name,
            "fail" if failed else "pass",
            f"{counts}; net {worse - better} worse {bound} {settings.max_recall_regressions}",
        )
    from scipy.stats import binomtest  # scipy.stats takes a while to import: only when a test is made

    p_value = binomtest(worse, worse + better, 0.5, alternative="greater").pvalue
    failed = p_value < settings.mcnemar_alpha
    bound = "<" if failed else ">="
    return GateCheck(
        name,
        "fail" if failed else "pass",
        f"{counts}; McNemar exact p = {p_value:.4f} {bound} {settings.mcnemar_alpha:g}",
    )


def _drift(report: Report, settings: GateSettings) -> GateCheck:
    name = CALIBRATION_DRIFT
    probe = _probe(report, CALIBRATION_DRIFT)
    if probe is None or probe.verdict == Verdict.SKIP:
        return GateCheck(name, "not applicable", probe.message if probe is not None else "not in the report")
    retention = _probe(report, ANSWER_RETENTION)
    if retention is not None and retention.verdict == Verdict.SKIP:
        return GateCheck(name, "not applicable", f"no general knowledge to lose: {retention.message}")
    if probe.verdict == Verdict.ERROR or probe.raw is None:
        return GateCheck(name, "fail", f"not measured: {probe.message}")
    failed = probe.raw > settings.max_fraction_regressed
    bound = ">" if failed else "<="
    return GateCheck(
        name,
        "fail" if failed else "pass",
        f"{probe.raw:.1%} of the items regressed {bound} {settings.max_fraction_regressed:.1%}",
    )


def _retention(report: Report, settings: GateSettings) -> GateCheck:
    name = ANSWER_RETENTION
    probe = _probe(report, ANSWER_RETENTION)
    if probe is None or probe.verdict == Verdict.SKIP:
        return GateCheck(name, "not applicable", probe.message if probe is not None else "not in the report")
    if probe.verdict == Verdict.ERROR or probe.raw is None:
        return GateCheck(name, "fail", f"not measured: {probe.message}")
    evidence = probe.evidence
    right, kept = evidence.get("base_right"), evidence.get("kept")
    unknown: Any = evidence.get("lost_knowledge")  # a count of the report's JSON; None in a report older than it
    if not isinstance(right, int) or not isinstance(kept, int) or right <= 0:
        return GateCheck(name, "fail", f"not measured: the report has no base_right and kept counts ({probe.message})")
    by_knowledge = settings.answer_retention_counts == "knowledge" and unknown is not None
    lost = unknown if by_knowledge else right - kept
    rule = settings.retention_rule(right)
    failed = not rule.passes(lost)
    bound = f"{lost} lost {'>' if failed else '<='} {rule.describe()}"
    if by_knowledge:
        detail = f"still knows {right - unknown}/{right} of the base's right answers (answers {kept}/{right}): {bound}"
    else:
        detail = f"kept {kept}/{right} of the base's right answers: {bound}"
        if unknown is not None and kept < right:  # as the probe's message says it
            detail += f"; {lost_split(evidence['lost_wording'], right - kept)}"
    return GateCheck(name, "fail" if failed else "pass", detail)


def _dialogue(report: Report, settings: GateSettings) -> GateCheck:
    name = "dialogue_answers"
    probe = _probe(report, MULTI_TURN)
    if probe is None or probe.verdict == Verdict.SKIP:
        return GateCheck(name, "not applicable", probe.message if probe is not None else "not in the report")
    retention = _probe(report, ANSWER_RETENTION)
    if retention is not None and retention.verdict == Verdict.SKIP:
        return GateCheck(
            name, "not applicable", f"a base without general knowledge holds no dialogue: {retention.message}"
        )
    answered = probe.evidence.get("answered_per_turn")
    if probe.verdict == Verdict.ERROR or not isinstance(answered, list) or len(answered) < 2:
        return GateCheck(name, "fail", f"not measured: {probe.message}")
    first, later = answered[0], answered[1:]
    if first == 0:
        return GateCheck(name, "not applicable", "turn 1 answered none of the document's questions exactly")
    need = settings.min_dialogue_answers * first
    fewest = min(later)
    failed = fewest < need
    per_turn = " / ".join(str(a) for a in answered)
    detail = (
        f"exact answers per turn {per_turn} of {probe.evidence.get('num_prompts', '?')}: the fewest at turns 2–"
        f"{len(answered)}, {fewest}, {'<' if failed else '>='} {settings.min_dialogue_answers:g} × {first}"
    )
    return GateCheck(name, "fail" if failed else "pass", detail)
