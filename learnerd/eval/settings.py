"""``[evaluation]``: the evaluation reconciler's settings (:mod:`learnerd.reconcilers.evaluation`,
:mod:`learnerd.eval`); :class:`learnerd.eval.probes.base.EvalOptions` adds the probes' own knobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from learnerd.ml.settings import device_spec
from learnerd.sections import Section

if TYPE_CHECKING:  # a settings module stays a leaf: ml.divergence imports numpy
    from learnerd.eval.retention_rule import RetentionRule
    from learnerd.ml.divergence import Completion


class GateSettings(Section):
    """the promotion gate: a candidate version becomes current only when every check passes
    (docs/evaluation.md, "The promotion gate")"""

    max_recall_regressions: int = Field(1, ge=0)
    """recall probes the candidate may fail, net of those it newly passes, among those the current version
    passed (when fewer than mcnemar_min_pairs probes changed)"""
    mcnemar_min_pairs: int = Field(10, ge=1)
    """from this many changed probes (pass→fail plus fail→pass) on, McNemar's exact test decides instead"""
    mcnemar_alpha: float = Field(0.05, gt=0, lt=1)
    """McNemar's exact one-sided test rejects a candidate whose recall is worse at this significance level"""
    max_fraction_regressed: float = Field(0.05, ge=0, le=1)
    """calibration_drift: the largest fraction of sway's general-knowledge items the candidate may regress"""
    retention_target_keep: float = Field(0.97, gt=0, le=1)
    """answer_retention: a candidate that truly keeps this fraction of the base's right answers passes with
    probability retention_power (the rule's first operating point)"""
    retention_floor_keep: float = Field(0.90, ge=0, lt=1)
    """answer_retention: a candidate that truly keeps only this fraction fails with probability
    retention_power (the second; 0.0 fails only a candidate that loses every right answer)"""
    retention_power: float = Field(0.95, gt=0.5, lt=1)
    """answer_retention: the probability of both operating points; the allowed lost count follows from the
    base's right answers at each evaluation (docs/evaluation.md, "Retention as a statistical decision")"""
    answer_retention_counts: Literal["answers", "knowledge"] = "answers"
    """which lost answers answer_retention counts: "answers", every right answer the candidate no longer
    gives; "knowledge", only those it no longer gives when led along the base's own answer (the probe's
    lost_knowledge: a wording that parted from the base's at a near-tie does not count)"""
    min_dialogue_answers: float = Field(0.9, ge=0, le=1)
    """dialogue_answers: at every later turn of the multi-turn probe the candidate answers at least this
    fraction as many of the document's questions exactly as at turn 1"""

    @model_validator(mode="after")
    def _floor_below_target(self) -> GateSettings:
        if not self.retention_floor_keep < self.retention_target_keep:
            raise ValueError(
                f"evaluation.gate.retention_floor_keep ({self.retention_floor_keep}) must be below "
                f"retention_target_keep ({self.retention_target_keep})"
            )
        return self

    def retention_rule(self, n: int) -> RetentionRule:
        """``answer_retention``'s rule for ``n`` right answers at these operating points
        (:func:`~learnerd.eval.retention_rule.retention_rule`)."""
        from learnerd.eval.retention_rule import retention_rule  # a settings module stays a leaf

        return retention_rule(n, self.retention_target_keep, self.retention_floor_keep, self.retention_power)


class EvaluationSettings(Section):
    """sway-style evaluation of every committed adapter version."""

    auto_harvest: bool = False
    """write failing probes back into the document (which retrains it)"""
    harvest_tag: str = Field("auto-harvest", min_length=1)
    """marker source prefix of harvested sections: "<tag>/<probe>\""""
    min_confidence: float = Field(0.0, ge=0, le=1)
    """harvest only failures at least this far from the reference (1 - similarity)"""
    max_failing_cycles: int = Field(3, ge=1)
    """a probe still failing after this many cycles with its harvested copy is reported as stuck and never
    harvested again (until it passes once)"""
    null_runs: int = Field(3, ge=0, le=20)
    """noise adapters the z-scores are calibrated on (0: fixed thresholds)"""
    calibration: Literal["sway", "sway-exact", "document"] = "sway"
    """"sway": delta_kl's null on sway's sentinel prompts, noise filled in module order (z-scores compare
    with sway's); "sway-exact": that, and top-k tails treated as sway 0.1.0 does (its numbers, not the
    exact divergence); "document": on the document's prompts"""
    num_threads: int = Field(0, ge=0)
    """torch threads while evaluating; 0 = the cores idle now (at least 1)"""
    max_prompts: int = Field(8, ge=1)
    """prompts per divergence probe"""
    max_turns: int = Field(4, ge=2, le=8)
    """dialogue length of the multi-turn probe (2..8)"""
    half_life_target: float = Field(2.0, gt=0)
    """the multi-turn probe passes at a half-life of at least this many turns"""
    retention_pool_size: int = Field(0, ge=0)
    """answer_retention asks this many of its 470 general questions, a seeded sample, the same at every
    evaluation (0: all): fewer make an evaluation shorter and the retention rule's operating points weaker
    (docs/evaluation.md, "Retention as a statistical decision")"""
    retention_max_new_tokens: int = Field(32, ge=1)
    """answer_retention: new tokens of each greedy answer at most"""
    retention_alone_sample: int = Field(64, ge=1)
    """answer_retention: of the base's right answers the router gives the base, the adapter alone answers at most
    this many (a seeded sample) for its own kept count, estimated from them"""
    device: str = "auto"
    """where the evaluated model runs: auto, cpu, cuda, cuda:N"""
    gate: GateSettings = Field(default_factory=GateSettings)

    @property
    def sway_nulls(self) -> bool:
        """Null adapters made and measured as sway 0.1.0 does (``calibration`` "sway" or "sway-exact")."""
        return self.calibration != "document"

    @property
    def top_k_completion(self) -> Completion:
        """How divergences complete a top-k's tail (:mod:`learnerd.ml.divergence`): sway's union under
        "sway-exact", else the whole vocabulary."""
        return "union" if self.calibration == "sway-exact" else "vocabulary"

    _device = field_validator("device")(device_spec("evaluation"))

    @field_validator("harvest_tag")
    @classmethod
    def _tag_is_a_path_segment(cls, value: str) -> str:
        if '"' in value or "/" in value:
            raise ValueError(f'evaluation.harvest_tag must be non-empty, without "/" or a double quote, not {value!r}')
        return value
