"""``evolution.png``: an evolution run's scores per iteration (matplotlib's Agg canvas, no display needed).

Three panels sharing the iteration axis: the composite score (with the best so far and shortness),
the correctness ratio, and the mean response length in tokens.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any


def render_evolution_png(history: Sequence[Mapping[str, Any]], title: str = "steering-delta evolution") -> bytes:
    """PNG bytes of the three panels for ``history`` (``history.json``'s ``iterations`` entries:
    ``iteration``, ``composite``, ``shortness``, ``correctness``, ``mean_len``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    x = [h["iteration"] for h in history]
    composite = [h["composite"] for h in history]
    best = [max(composite[: i + 1]) for i in range(len(composite))]
    fig = Figure(figsize=(8, 8), dpi=100, layout="constrained")
    top, middle, bottom = fig.subplots(3, 1, sharex=True)
    top.plot(x, composite, "o-", color="tab:blue", label="composite")
    top.step(x, best, where="post", color="tab:green", label="best so far")
    top.plot(x, [h["shortness"] for h in history], "--", color="tab:gray", label="shortness")
    top.set_ylabel("score")
    top.legend(loc="lower right", fontsize="small")
    middle.plot(x, [h["correctness"] for h in history], "o-", color="tab:orange")
    middle.set_ylabel("correctness ratio")
    middle.set_ylim(-0.05, 1.05)
    bottom.plot(x, [h["mean_len"] for h in history], "o-", color="tab:red")
    bottom.set_ylabel("mean length (tokens)")
    bottom.set_xlabel("iteration")
    bottom.set_ylim(bottom=0)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (top, middle, bottom):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    out = io.BytesIO()
    FigureCanvasAgg(fig).print_png(out)
    return out.getvalue()
