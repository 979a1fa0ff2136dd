"""How many torch threads an evaluation uses.

Evaluation is a chain of small matrix products; with more intra-op threads than idle cores, OpenMP's
spinning workers wait on each other and a loaded machine runs it several times slower than one thread
would. So the count is chosen, not left to torch's default (every physical core): an explicit request,
else ``$OMP_NUM_THREADS`` when set, else the cores idle right now — the cores this process may run on
(``os.sched_getaffinity``) minus the 1-minute load average, rounded, at least 1.
"""

from __future__ import annotations

import os

from learnerd.ml.device import usable_cores


def choose_threads(requested: int = 0) -> int:
    """``requested`` when > 0, else ``$OMP_NUM_THREADS`` when it is a positive integer, else the idle cores
    (see the module docstring); always >= 1.

    Raises:
        ValueError: ``requested`` < 0.
    """
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: choose), not {requested}")
    if requested:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, min(cores, round(cores - load)))


def set_torch_threads(requested: int = 0) -> int:
    """``torch.set_num_threads(choose_threads(requested))`` (process-wide); the count set."""
    import torch

    threads = choose_threads(requested)
    torch.set_num_threads(threads)
    return threads
