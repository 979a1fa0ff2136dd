"""``[evaluation]``: the evaluation reconciler's settings (:mod:`learnerd.reconcilers.evaluation`,
:mod:`learnerd.eval`); :class:`learnerd.eval.probes.base.EvalOptions` adds the probes' own knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from learnerd.ml.divergence import Completion
from learnerd.ml.settings import device_spec
from learnerd.sections import Section


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
    device: str = "auto"
    """where the evaluated model runs: auto, cpu, cuda, cuda:N"""

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
