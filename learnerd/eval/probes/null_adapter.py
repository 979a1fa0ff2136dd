"""``null_adapter``: the baseline every z-score is measured against (sway's S02 calibration probe).

For each calibrated probe kind and each of ``null_runs`` seeds (``null_seed_base + i``), the probe's raw
metric is computed with the fine-tuned side replaced by a random-noise adapter of the trained one's shape
(:meth:`~learnerd.eval.backend.DifferentialBackend.as_null_adapter`). ``calibration = "sway"`` (the
default) does it as sway 0.1.0 does: the noise fills the LoRA tensors in module order and ``delta_kl`` is
calibrated on sway's sentinel prompts, so equal raw values give sway's z-scores; ``"document"`` fills them
in parameter-name order and calibrates on the document's prompts. The per-kind ``mean``, population
``std`` (floored at 1e-6), ``n`` and ``degenerate`` (1.0 when there is one sample or all are equal: no
z-score is computed then, sway's rule) go to ``ctx.null_stats``,
where later probes read them, and to the report's top-level ``null_stats``. Calibrated kinds: the probes
of :data:`~learnerd.eval.probes.PROBES` that offer ``raw_value`` (:data:`~learnerd.eval.probes.CALIBRATED`);
the recall and multi-turn probes have no meaningful noise baseline (a noise adapter recalls nothing and
holds no dialogue).

The probe's own verdict is ``pass`` (it judges nothing; its category, ``baseline``, weighs 0 in the overall score),
``skip`` when ``null_runs`` is 0.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import TYPE_CHECKING

from pydantic import Field

from learnerd.eval.probes.common import NotApplicable, ProbeOptions, result, skipped
from learnerd.eval.report import ProbeResult, Verdict

if TYPE_CHECKING:
    from learnerd.eval.probes.base import ProbeContext

KIND = "null_adapter"
CATEGORY = "baseline"  # sway's score category
NAME = "null_baseline"
STD_FLOOR = 1e-6


class Options(ProbeOptions):
    """The noise adapters' knobs (``null_runs`` and ``calibration`` are ``[evaluation]`` settings; sway's
    ``NullAdapterSpec`` defaults)."""

    null_init_scale: float = Field(0.02, gt=0)
    """standard deviation of a noise adapter's lora_A / lora_B entries"""
    null_seed_base: int = 1000
    """the noise adapters' seeds are null_seed_base, null_seed_base + 1, …"""


def run(ctx: ProbeContext) -> ProbeResult:
    """Calibrate, fill ``ctx.null_stats``, and report the samples."""
    from learnerd.eval.probes import CALIBRATED  # the registry lists this module too: imported when it is complete

    opts = ctx.options
    if opts.null_runs == 0:
        return skipped(NAME, KIND, "null_runs is 0: probes fall back to fixed thresholds")
    started = time.perf_counter()
    samples: dict[str, list[float]] = {}
    not_calibrated: dict[str, str] = {}
    module_order = opts.sway_nulls
    for probe in CALIBRATED:
        kind = probe.KIND
        values: list[float] = []
        for i in range(opts.null_runs):
            seed = opts.null_seed_base + i
            if kind not in not_calibrated:
                try:
                    view = partial(ctx.backend.as_null_adapter, seed, opts.null_init_scale, module_order=module_order)
                    values.append(probe.raw_value(ctx, view))
                except NotApplicable as exc:
                    not_calibrated[kind] = str(exc)
                except Exception as exc:
                    not_calibrated[kind] = f"{type(exc).__name__}: {exc}"
            ctx.step(f"null adapter {seed}: {kind}")
        if kind not in not_calibrated:
            samples[kind] = values
    for kind, values in samples.items():
        std = statistics.pstdev(values) if len(values) > 1 else 0.0
        ctx.null_stats[kind] = {
            "mean": statistics.fmean(values),
            "std": max(std, STD_FLOOR),
            "n": float(len(values)),
            "degenerate": 1.0 if len(values) <= 1 or std == 0.0 else 0.0,
        }
    evidence = {
        "null_stats": {k: dict(v) for k, v in ctx.null_stats.items()},
        "per_kind_raw_samples": samples,
        "calibrated_kinds": list(samples),
        "not_calibrated": not_calibrated,
        "runs": opts.null_runs,
        "init_scale": opts.null_init_scale,
        "seed_base": opts.null_seed_base,
        "calibration": opts.calibration,
        "weight": 1.0,
    }
    message = f"{len(samples)} kind(s) calibrated over {opts.null_runs} noise adapter(s)"
    if not_calibrated:
        message += f"; not calibrated: {', '.join(not_calibrated)}"
    return result(NAME, KIND, Verdict.PASS, score=1.0, raw=None, evidence=evidence, message=message, started=started)
