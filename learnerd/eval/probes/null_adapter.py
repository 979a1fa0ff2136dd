"""``null_adapter``: the baseline every z-score is measured against (sway's S02 calibration probe).

For each calibrated probe kind and each of ``null_runs`` seeds (``null_seed_base + i``), the probe's raw
metric is computed with the fine-tuned side replaced by a random-noise adapter of the trained one's shape
(:meth:`~learnerd.eval.backend.DifferentialBackend.as_null_adapter`). The per-kind ``mean``, population
``std`` (floored at 1e-6 so identical samples cannot divide by zero) and ``n`` go to ``ctx.null_stats``,
where later probes read them, and to the report's top-level ``null_stats``. Calibrated kinds:
``delta_kl`` and ``section_internalization``; the recall and multi-turn probes have no meaningful noise
baseline (a noise adapter recalls nothing and holds no dialogue).

The probe's own verdict is ``pass`` (it judges nothing; its category, ``baseline``, weighs 0 in the overall score),
``skip`` when ``null_runs`` is 0.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

from learnerd.eval.probes import delta_kl, internalization
from learnerd.eval.probes.base import NotApplicable, ProbeContext, ViewFactory, result, skipped
from learnerd.eval.report import ProbeResult, Verdict

KIND = "null_adapter"
NAME = "null_baseline"
STD_FLOOR = 1e-6
CALIBRATED: dict[str, Callable[[ProbeContext, ViewFactory], float]] = {
    delta_kl.KIND: delta_kl.raw_value,
    internalization.KIND: internalization.raw_value,
}


def run(ctx: ProbeContext) -> ProbeResult:
    """Calibrate, fill ``ctx.null_stats``, and report the samples."""
    opts = ctx.options
    if opts.null_runs == 0:
        return skipped(NAME, KIND, "null_runs is 0: probes fall back to fixed thresholds")
    started = time.perf_counter()
    samples: dict[str, list[float]] = {}
    not_calibrated: dict[str, str] = {}
    for kind, raw_value in CALIBRATED.items():
        try:
            samples[kind] = [
                raw_value(ctx, partial(ctx.backend.as_null_adapter, opts.null_seed_base + i, opts.null_init_scale))
                for i in range(opts.null_runs)
            ]
        except NotApplicable as exc:
            not_calibrated[kind] = str(exc)
        except Exception as exc:
            not_calibrated[kind] = f"{type(exc).__name__}: {exc}"
    for kind, values in samples.items():
        std = statistics.pstdev(values) if len(values) > 1 else 0.0
        ctx.null_stats[kind] = {"mean": statistics.fmean(values), "std": max(std, STD_FLOOR), "n": float(len(values))}
    evidence = {
        "null_stats": {k: dict(v) for k, v in ctx.null_stats.items()},
        "per_kind_raw_samples": samples,
        "calibrated_kinds": list(samples),
        "not_calibrated": not_calibrated,
        "runs": opts.null_runs,
        "init_scale": opts.null_init_scale,
        "seed_base": opts.null_seed_base,
        "weight": 1.0,
    }
    message = f"{len(samples)} kind(s) calibrated over {opts.null_runs} noise adapter(s)"
    if not_calibrated:
        message += f"; not calibrated: {', '.join(not_calibrated)}"
    return result(NAME, KIND, Verdict.PASS, score=1.0, raw=None, evidence=evidence, message=message, started=started)
