"""Harvest: turn what a sway report says the adapter got wrong into ``!probe`` sections of its document.

After dlm's ``dlm harvest`` (``src/dlm/harvest/``), which reads only ``evidence.prompt`` /
``evidence.reference`` of failing probes — a shape real sway reports never carry. learnerd also reads
what they do carry:

* a failing probe's ``evidence.prompt`` + ``evidence.reference`` → one candidate (dlm's rule;
  ``evidence.confidence`` in [0, 1], default 1.0, is compared with ``min_confidence``);
* a *failing* ``calibration_drift``'s ``evidence.worst_offenders[]`` (``prompt``, ``gold``): the
  general-knowledge items whose per-token log-probability regressed most. Like every candidate, only from a
  failing probe (dlm reads failing probes only). They are sway's calibration items — what judges every
  candidate — so they are **sealed**: planned, then skipped (:attr:`SkipReason.SEALED`), never written;
* a failing ``section_internalization``'s ``evidence.per_section[]`` entries with ``passed: false``
  → :class:`UndertrainedSection` findings: the document's own sections (by section id) the adapter did
  not learn. They need more training, not a new section, so they are reported and never written.

**The sealed holdout** (:mod:`learnerd.eval.holdout`): a candidate whose prompt is one of the texts that judge a
candidate — ``answer_retention``'s pool, sway's calibration items, ``paraphrase_invariance``'s paraphrases of the
document's questions — is skipped as :attr:`SkipReason.SEALED` whatever probe it came from: trained, it would
make the evaluation measure recitation.

A failing probe that yields none of these has no reference: ``strict`` refuses the whole harvest
(:class:`NoReferenceError`), lax lists it in :attr:`HarvestPlan.unharvestable`. Each candidate becomes
:func:`~learnerd.store.dlm.edit.probe_section` with marker source ``"<tag>/<probe name>"``, appended at
the end of the document unless a section with the same id is already there (the id of the layout older
learnerd releases wrote, with a final blank line, counts too). :func:`auto_harvest` is the library entry point the
evaluation reconciler calls; ``learnerd harvest`` is a thin CLI over it.

``reinforce`` (a learnerd extension, used by the evaluation reconciler): a candidate whose pair the
document already holds as a ``### Q !probe`` pair — the adapter failed one of the document's own probes —
cannot be added again as a probe (same section id); instead it is written once as a *reinforcement copy*:
the same pair under a plain ``### Q`` header (trained again, a new section id, not a second probe), marker
source ``"<tag>/<probe name>"``. A candidate whose pair a section with that exact marker source already
holds is already harvested and is skipped, so harvesting the same report twice writes nothing the second
time. :func:`auto_harvest` in ``reinforce`` mode also removes the *orphaned* copies of ``tag``: those whose
pair is no longer a ``!probe`` of the document (a person edited or deleted the probe), so an outdated
answer is not trained forever.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from learnerd.eval.holdout import SWAY_ITEMS, holdout
from learnerd.eval.report import SCHEMA_VERSION, Verdict
from learnerd.store.dlm import (
    Document,
    DocumentError,
    Section,
    UnrepresentableError,
    WriteOutcome,
    probe_section,
    probe_section_ids,
    read_document,
    update_document,
)
from learnerd.store.dlm.qa import Q_HEADER

DEFAULT_TAG = "auto-harvest"
WORST_OFFENDERS = "evidence.worst_offenders"


class HarvestError(Exception):
    """Harvest cannot proceed (the CLI exits 1)."""


class NoReferenceError(HarvestError):
    """Strict mode met a failing probe with nothing to harvest from."""


class MalformedReportError(HarvestError):
    """The report is unreadable, not JSON, or lacks what dlm's harvest needs (``schema_version``, ``probes``)."""


class HarvestProbe(Protocol):
    """What harvest reads of a probe result (a :class:`~learnerd.eval.report.ProbeResult` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def evidence(self) -> Mapping[str, Any]: ...


class HarvestSource(Protocol):
    """What harvest reads of a report (a :class:`~learnerd.eval.report.Report` is one)."""

    @property
    def probes(self) -> Sequence[HarvestProbe]: ...


@dataclass(frozen=True)
class ReportProbe:
    """One probe of a report read by :func:`load_harvest_report`: ``verdict`` as written (only ``"fail"``
    is harvested), ``evidence`` ``{}`` when the report's is not an object."""

    name: str
    kind: str
    verdict: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HarvestReport:
    """The probes of a report as dlm's harvest reads it; ``ignored``: indexes of ``probes[]`` entries that
    are not objects (dlm skips them with a warning)."""

    probes: tuple[ReportProbe, ...]
    ignored: tuple[int, ...] = ()


def load_harvest_report(path: str | Path) -> HarvestReport:
    """Read a sway report for harvesting with exactly the requirements of dlm 0.10.0's harvest
    (``dlm/harvest/sway_reader.py``): a JSON object with an integer ``schema_version`` no newer than 1
    and a ``probes`` array. Nothing else of sway's envelope (``sway_version``, ``started_at``, ``score``,
    per-probe ``raw``…) is needed; a probe's ``name`` defaults to ``"<unnamed>"`` and ``kind`` to ``""``,
    as in dlm. (:func:`learnerd.eval.report.load_report` is the strict reader of a whole report.)

    Raises:
        MalformedReportError: unreadable, not JSON (with the line), or missing / mistyped
            ``schema_version`` or ``probes``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MalformedReportError(f"{path}: cannot read the report: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedReportError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise MalformedReportError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise MalformedReportError(f"{path}: a sway report is a JSON object, not {type(data).__name__}")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise MalformedReportError(f"{path}: schema_version: missing or not an integer")
    if version > SCHEMA_VERSION:
        raise MalformedReportError(
            f"{path}: schema_version: is {version}, newer than this learnerd reads ({SCHEMA_VERSION})"
        )
    probes = data.get("probes")
    if not isinstance(probes, list):
        raise MalformedReportError(f"{path}: probes: missing or not an array")
    read = [
        ReportProbe(
            str(p.get("name") or "<unnamed>"),
            str(p.get("kind") or ""),
            str(p.get("verdict")),
            p["evidence"] if isinstance(p.get("evidence"), dict) else {},
        )
        for p in probes
        if isinstance(p, dict)
    ]
    return HarvestReport(tuple(read), tuple(i for i, p in enumerate(probes) if not isinstance(p, dict)))


@dataclass(frozen=True)
class Candidate:
    """A Q/A pair read from a report. ``origin`` names the report field it came from."""

    prompt: str
    reference: str
    probe_name: str
    probe_kind: str
    origin: str
    confidence: float = 1.0


class SkipReason(StrEnum):
    ALREADY_PRESENT = "already_present"
    BELOW_CONFIDENCE = "below_confidence"
    UNREPRESENTABLE = "unrepresentable"
    SEALED = "sealed"
    """a judging item (:mod:`learnerd.eval.holdout`): never written into a document"""


@dataclass(frozen=True)
class Addition:
    """A candidate that will be written, as the section that carries it; ``reinforcement`` when the section
    is a plain ``### Q`` copy of a probe the document already has (see ``reinforce``)."""

    candidate: Candidate
    section: Section
    reinforcement: bool = False


@dataclass(frozen=True)
class Skipped:
    candidate: Candidate
    reason: SkipReason
    detail: str = ""


@dataclass(frozen=True)
class UndertrainedSection:
    """A section a failing ``section_internalization`` probe says the adapter did not learn.
    ``section`` is that section of the document, or None when the document has no section with that id
    (the report is about another revision of it)."""

    probe_name: str
    section_id: str
    section: Section | None


@dataclass(frozen=True)
class UnharvestableProbe:
    """A failing probe with no reference to harvest."""

    name: str
    kind: str
    reason: str


@dataclass(frozen=True)
class HarvestPlan:
    """What a harvest would do to one document; plain data for renderers and for :func:`apply_plan`."""

    additions: tuple[Addition, ...]
    skipped: tuple[Skipped, ...]
    undertrained: tuple[UndertrainedSection, ...]
    unharvestable: tuple[UnharvestableProbe, ...]


@dataclass(frozen=True)
class HarvestResult:
    """The plan that was (or, on a dry run, would have been) applied, the orphaned reinforcement copies
    removed (or that would be), and whether the file was written."""

    plan: HarvestPlan
    written: bool
    removed: tuple[Section, ...] = ()


def plan_harvest(
    document: Document,
    report: HarvestSource,
    *,
    tag: str = DEFAULT_TAG,
    min_confidence: float = 0.0,
    strict: bool = False,
    reinforce: bool = False,
) -> HarvestPlan:
    """Read ``report``'s candidates and findings and plan the sections to add to ``document``
    (``reinforce``: see the module docstring).

    Raises:
        NoReferenceError: ``strict`` and a failing probe has nothing to harvest.
    """
    candidates: list[Candidate] = []
    undertrained: list[UndertrainedSection] = []
    unharvestable: list[UnharvestableProbe] = []
    by_id = {s.section_id: s for s in document.sections}
    for probe in report.probes:
        if probe.verdict != Verdict.FAIL:
            continue
        evidence: Mapping[str, Any] = probe.evidence
        general = _worst_offenders(probe.name, probe.kind, evidence) if probe.kind == "calibration_drift" else []
        found = general + _prompt_reference(probe.name, probe.kind, evidence)
        if probe.kind == "section_internalization" and isinstance(evidence.get("per_section"), list):
            ids = [e["section_id"] for e in evidence["per_section"] if _failed_section(e)]
            undertrained += [UndertrainedSection(probe.name, sid, by_id.get(sid)) for sid in ids]
        elif not found:
            unharvestable.append(UnharvestableProbe(probe.name, probe.kind, "no evidence.prompt / evidence.reference"))
        candidates += found
    if strict and unharvestable:
        names = ", ".join(f"{u.name} ({u.kind})" for u in unharvestable)
        raise NoReferenceError(f"failing probe(s) without a reference: {names}; --lax skips them")

    existing = set(by_id)
    pairs = _pairs_by_source(document)
    sealed = holdout(held[0] for held_pairs in pairs.values() for held in held_pairs)
    additions: list[Addition] = []
    skipped: list[Skipped] = []
    for c in candidates:
        judging = SWAY_ITEMS if c.origin.startswith(WORST_OFFENDERS) else sealed.judging_set(c.prompt)
        if judging is not None:
            skipped.append(Skipped(c, SkipReason.SEALED, f"one of {judging}, which judge every candidate"))
            continue
        if c.confidence < min_confidence:
            skipped.append(
                Skipped(c, SkipReason.BELOW_CONFIDENCE, f"confidence {c.confidence:.2f} < {min_confidence:.2f}")
            )
            continue
        source = f"{tag}/{c.probe_name}" if tag else c.probe_name
        try:
            section = probe_section(c.prompt, c.reference, source=source)
        except UnrepresentableError as exc:
            skipped.append(Skipped(c, SkipReason.UNREPRESENTABLE, str(exc)))
            continue
        pair = section.qa_pairs()[0]
        if reinforce and (pair.question, pair.answer) in pairs.get(source, set()):
            skipped.append(Skipped(c, SkipReason.ALREADY_PRESENT, f"a section with source {source!r} holds the pair"))
            continue
        reinforcement = reinforce and any((pair.question, pair.answer, True) in held for held in pairs.values())
        if reinforcement:
            section = replace(section, body=(Q_HEADER, *section.body[1:]))
        section_ids = probe_section_ids(section)
        if section_ids & existing:
            held = min(section_ids & existing)
            skipped.append(Skipped(c, SkipReason.ALREADY_PRESENT, f"section {held} is in the document"))
            continue
        existing |= section_ids
        additions.append(Addition(c, section, reinforcement))
    return HarvestPlan(tuple(additions), tuple(skipped), tuple(undertrained), tuple(unharvestable))


def _pairs_by_source(document: Document) -> dict[str | None, set[tuple[Any, ...]]]:
    """Marker source (None: no marker) -> the Q/A pairs its sections hold, each as ``(q, a)`` and, for a
    probe, also ``(q, a, True)``. A section that breaks the Q/A grammar holds none."""
    out: dict[str | None, set[tuple[Any, ...]]] = {}
    for section in document.sections:
        if section.type != "instruction":
            continue
        try:
            found = section.qa_pairs()
        except DocumentError:
            continue
        held = out.setdefault(section.harvest_source, set())
        held |= {(p.question, p.answer) for p in found} | {(p.question, p.answer, True) for p in found if p.probe}
    return out


def apply_plan(document: Document, plan: HarvestPlan) -> Document:
    """``document`` with the plan's sections appended (in report order)."""
    for addition in plan.additions:
        document = document.append_section(addition.section)
    return document


def auto_harvest(
    path: str | Path,
    report: HarvestSource,
    *,
    tag: str = DEFAULT_TAG,
    min_confidence: float = 0.0,
    strict: bool = False,
    reinforce: bool = False,
    apply: bool = True,
) -> HarvestResult:
    """Harvest ``report`` into the document at ``path``; with ``apply=False`` only plan it
    (``reinforce``: see the module docstring).

    The plan is made against the document as read inside the compare-and-swap write, so a concurrent
    edit is merged, not lost (:func:`~learnerd.store.dlm.edit.update_document`).

    Raises:
        NoReferenceError: see :func:`plan_harvest` (nothing is written).
        DocumentError: the document is malformed.
        OSError: the document cannot be read or written.
    """
    results: list[HarvestResult] = []

    def edit(document: Document) -> Document:
        removed = orphaned_copies(document, tag) if reinforce else ()
        if removed:
            document = document.remove_sections(lambda s: s in removed)
        plan = plan_harvest(
            document, report, tag=tag, min_confidence=min_confidence, strict=strict, reinforce=reinforce
        )
        results.append(HarvestResult(plan, False, removed))
        return apply_plan(document, plan)

    if not apply:
        edit(read_document(path))
        return results[-1]
    outcome: WriteOutcome = update_document(path, edit)
    return replace(results[-1], written=outcome.written)


def orphaned_copies(document: Document, tag: str = DEFAULT_TAG) -> tuple[Section, ...]:
    """The reinforcement copies of ``tag`` (sections under a ``"<tag>/..."`` marker holding only plain
    ``### Q`` pairs) with a pair that is no longer a ``!probe`` anywhere in ``document``."""
    probes = {
        held[:2] for source_pairs in _pairs_by_source(document).values() for held in source_pairs if len(held) == 3
    }
    out = []
    for section in document.sections:
        if section.type != "instruction" or not (section.harvest_source or "").startswith(f"{tag}/"):
            continue
        try:
            found = section.qa_pairs()
        except DocumentError:
            continue
        if not any(p.probe for p in found) and any((p.question, p.answer) not in probes for p in found):
            out.append(section)
    return tuple(out)


def revert_harvest(path: str | Path, *, apply: bool = True) -> tuple[Section, ...]:
    """Strip every auto-harvested section (any marker source, learnerd's own probe sections included)
    from the document at ``path``; hand-written sections stay byte-identical. Returns the sections
    removed (with ``apply=False``: that would be removed, and nothing is written)."""
    if not apply:
        return read_document(path).auto_sections()
    removed: list[tuple[Section, ...]] = []

    def edit(document: Document) -> Document:
        removed.append(document.auto_sections())
        return document.strip_auto_sections()

    update_document(path, edit)
    return removed[-1]


def _prompt_reference(name: str, kind: str, evidence: Mapping[str, Any]) -> list[Candidate]:
    prompt, reference = evidence.get("prompt"), evidence.get("reference")
    if not (isinstance(prompt, str) and prompt.strip() and isinstance(reference, str) and reference.strip()):
        return []
    try:
        confidence = min(1.0, max(0.0, float(evidence.get("confidence", 1.0))))
    except (TypeError, ValueError):
        confidence = 1.0
    return [Candidate(prompt, reference, name, kind, "evidence.prompt/reference", confidence)]


def _worst_offenders(name: str, kind: str, evidence: Mapping[str, Any]) -> list[Candidate]:
    items = evidence.get("worst_offenders")
    if not isinstance(items, list):
        return []
    return [
        Candidate(item["prompt"], item["gold"], name, kind, f"{WORST_OFFENDERS}[{i}]")
        for i, item in enumerate(items)
        if isinstance(item, dict)
        and isinstance(item.get("prompt"), str)
        and isinstance(item.get("gold"), str)
        and item["prompt"].strip()
        and item["gold"].strip()
    ]


def _failed_section(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("section_id"), str) and entry.get("passed") is False
