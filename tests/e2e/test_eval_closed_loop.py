"""The closed loop, measured: the daemon trains → evaluates → harvests → retrains on its own, until it
settles.

A running :class:`Daemon` watches one under-trained document (dlm's default LoRA keys, 6 epochs where 40
memorise it): the file
watch queues it for training, each committed adapter version is evaluated (``on_committed`` → the
"evaluation" controller), ``auto_harvest`` writes reinforcement copies of the failing probes into the
document, and that write is the change the file watch turns into the next training cycle. Nothing in
the test calls a reconciler: it only waits until the daemon has been idle for a while.
"""

from __future__ import annotations

import time
from itertools import pairwise

import anyio
import pytest

from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.eval.history import history
from learnerd.eval.holdout import holdout
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import DLM_ID, qa_document, state_with_models
from tests.support.in_process import run_cli_here

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
SETTLE_S = 4.0  # idle this long (twice the debounce and more) counts as settled
DEADLINE_S = 600.0


def busy(daemon: Daemon) -> bool:
    intake = daemon.training_intake
    return not all(q.idle for q in daemon.queues.values()) or (intake is not None and len(intake.debouncer) > 0)


async def run_until_settled(daemon: Daemon) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.run, stop)
        deadline = time.monotonic() + DEADLINE_S
        idle_since = None
        while time.monotonic() < deadline:
            await anyio.sleep(0.25)
            if busy(daemon) or daemon.training.changes["adapters_committed"] == 0:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= SETTLE_S:
                break
        stop.set()


def test_the_daemon_raises_the_probe_pass_rate_on_its_own_until_it_settles(tmp_path, models_dir, minilm):
    state = state_with_models(tmp_path, models_dir)
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "qa.dlm"
    # dlm's own defaults for the other keys (not learnerd's memorisation recipe): an under-trained start
    dlm_defaults = "  lora_r: 8\n  lora_alpha: 16\n  lora_dropout: 0.05\n  micro_batch_size: 8\n"
    doc.write_text(qa_document(QA_PAIRS, epochs=6, training=dlm_defaults))
    cfg = Config(state_dir=state, docs_dirs=[docs])
    cfg.evaluation.auto_harvest = True
    # the loop reads probe_recall and the gate, neither of which reads a z-score or the divergence prompts: no
    # noise adapters, one prompt per divergence probe (as tests/support/serving.write_config)
    cfg.evaluation.null_runs, cfg.evaluation.max_prompts = 0, 1
    cfg.training.debounce_s = 0.5
    cfg.training.num_threads = 1
    cfg.training.warm_spare = False  # a spare is started after every cycle: the last one, never used, is pure cost
    daemon = Daemon(cfg, embedder=minilm)
    try:
        anyio.run(run_until_settled, daemon)
        points = history(daemon.evaluation.store, DLM_ID)
        committed = daemon.training.changes["adapters_committed"]
        evaluated = daemon.evaluation.changes["versions_evaluated"]
        metric = daemon.registry.get_sample_value
    finally:
        daemon.close()

    print("\ncycle  version  probe pass rate  score")
    for i, p in enumerate(points, start=1):
        print(f"{i:>5}  {p.name}    {p.passed:>2}/{p.judged} ({p.pass_rate:4.0%})     {p.score:.3f}")
    rates = [p.pass_rate for p in points]
    assert 2 <= len(points) == committed == evaluated, (committed, evaluated, rates)
    assert all(b > a for a, b in pairwise(rates)), rates
    # the same story in the daemon's metrics
    assert metric("learnerd_training_cycles_total", {"outcome": "committed"}) == committed
    assert metric("learnerd_training_cycle_duration_seconds_count") == committed
    assert metric("learnerd_evaluations_total") == evaluated
    assert [p.gate for p in points] == ["promoted"] * len(points)  # each better than the last: all promoted
    assert metric("learnerd_promotions_total", {"outcome": "promoted"}) == committed
    assert metric("learnerd_promotions_total", {"outcome": "rejected"}) == 0
    assert metric("learnerd_adapter_version", {"document": str(doc)}) == points[-1].version
    assert metric("learnerd_probe_pass_rate", {"document": str(doc)}) == pytest.approx(rates[-1])
    assert metric("learnerd_evaluation_score", {"document": str(doc)}) == pytest.approx(points[-1].score, abs=1e-4)
    assert metric("learnerd_training_loss_nats", {"document": str(doc)}) > 0
    assert rates[0] <= 0.5 and rates[-1] >= 0.8, rates
    copies = [s for s in read_document(doc).sections if (s.harvest_source or "").startswith("auto-harvest/")]
    sealed = sum(holdout().judging_set(q) is not None for q, _ in QA_PAIRS)  # judging items are never harvested
    assert len(copies) == points[0].judged - points[0].passed - sealed, "every other failing probe got its copy"
    assert all(not p.probe for s in copies for p in s.qa_pairs()), "reinforcement copies, not new probes"

    plot = tmp_path / "closed-loop.png"
    proc = run_cli_here("eval", str(doc), "--history", "--plot", str(plot), "--state-dir", str(state))
    print(proc.stdout)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
