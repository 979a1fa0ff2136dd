"""The evaluation probes (sway's probe kinds), one module each, and their registry.

A probe module declares ``KIND`` (sway's probe name), ``CATEGORY`` (sway's score category: adherence,
attribution, calibration, baseline) and ``run(ctx) -> ProbeResult | list[ProbeResult]``; its knobs, if it
has any, in ``Options`` (a :class:`~learnerd.eval.probes.common.ProbeOptions`, composed into
:class:`~learnerd.eval.probes.base.EvalOptions`); one that supports null-adapter calibration also offers
``raw_value(ctx, view_factory) -> float`` (:mod:`.null_adapter` calibrates it). Adding a probe: one module
here and one entry in :data:`PROBES` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from learnerd.eval.probes import (
    calibration_drift,
    coherence,
    delta_kl,
    internalization,
    null_adapter,
    paraphrase,
    recall,
    retention,
)

#: The probes in the order a run executes them: the null-adapter calibration first (its statistics feed
#: the z-scores of the others).
PROBES: tuple[ModuleType, ...] = (
    null_adapter,
    recall,
    delta_kl,
    coherence,
    internalization,
    paraphrase,
    calibration_drift,
    retention,
)

#: The probes :mod:`.null_adapter` calibrates, in :data:`PROBES` order: those that offer ``raw_value``.
CALIBRATED: tuple[ModuleType, ...] = tuple(probe for probe in PROBES if hasattr(probe, "raw_value"))

#: The score category of each probe kind, ``preflight`` (the finite check before any probe) included.
CATEGORY: Mapping[str, str] = {"preflight": "baseline", **{probe.KIND: probe.CATEGORY for probe in PROBES}}
