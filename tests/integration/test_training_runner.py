"""Training in a child process: killed, cancelled or failing, it never leaves a half-written adapter."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
import structlog

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.loader import load_adapter
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.training.config import TrainingConfig
from learnerd.training.cycle import plan_cycle, train_cycle
from learnerd.training.lora import train_lora
from learnerd.training.runner import TrainingFailed, WarmSpare
from tests.conftest import cli_env
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS

ROWS = [TrainingRow.chat(f"qa{i:02d}", q, a) for i, (q, a) in enumerate(QA_PAIRS[:4])]
NEW_ROWS = [*ROWS, TrainingRow.chat("extra", *EXTRA_QA_PAIRS[0])]
ENDLESS = TrainingConfig(learning_rate=1e-2, max_steps=1_000_000)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def base(models_dir):
    return resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)


@pytest.fixture
def store_with_v1(tmp_path, base):
    """An adapter store whose document "doc" has a committed, promoted v0001 (a few steps on four rows)."""
    from learnerd.store.adapters import AdapterMetadata

    store = AdapterStore(tmp_path / "adapters")
    model, tokenizer = load_model_directory(base.path)
    config = TrainingConfig(learning_rate=1e-2, max_steps=3)
    peft_model, result = train_lora(model, tokenizer, ROWS, config)
    with store.stage("doc") as staging:
        peft_model.save_pretrained(staging.path)
        ids = tuple(r.section_id for r in ROWS)
        v1 = store.commit(
            staging,
            AdapterMetadata(
                base_model=base.name, base_model_identity=base.identity, section_ids=ids, new_section_ids=ids,
                replay_section_ids=(), parent_version=None, steps=result.steps, start_loss=result.start_loss,
                final_loss=result.final_loss, tokens_trained=result.tokens_trained, seed=config.seed,
                hyperparameters=config.to_dict(), library_versions={}, created_at="2026-01-01T00:00:00+00:00",
            ),
        )  # fmt: skip
    store.promote(v1)
    return store


def _assert_only_v1_and_it_loads(store: AdapterStore, base) -> None:
    assert [v.name for v in store.list_versions("doc")] == ["v0001"]
    assert store.current("doc").name == "v0001"
    assert not list((store.root / "doc" / "versions").glob(".staging-*"))
    model, _ = load_model_directory(base.path)
    load_adapter(model, store.current("doc"))
    # The document still differs from v0001, so the next cycle trains again.
    assert plan_cycle(NEW_ROWS, ENDLESS, base, store.current("doc")).mode == "incremental"


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_kill_9_of_the_training_process_keeps_the_previous_adapter(store_with_v1, base):
    pids: list[int] = []

    def kill_at_step_2(event):
        if event.step == 2:
            os.kill(pids[0], signal.SIGKILL)

    cycle = functools.partial(
        train_cycle, store_with_v1, "doc", base, NEW_ROWS, ENDLESS,
        num_threads=1, on_start=pids.append, on_progress=kill_at_step_2,
    )  # fmt: skip
    with pytest.raises(TrainingFailed, match="killed by SIGKILL") as info:
        anyio.run(cycle)
    assert info.value.returncode == -signal.SIGKILL and not info.value.permanent
    _assert_only_v1_and_it_loads(store_with_v1, base)


def test_cancelling_the_caller_terminates_the_child(store_with_v1, base):
    pids: list[int] = []

    async def main():
        first_step = anyio.Event()
        async with anyio.create_task_group() as tg:
            cycle = functools.partial(
                train_cycle, store_with_v1, "doc", base, NEW_ROWS, ENDLESS,
                num_threads=1, on_start=pids.append, on_progress=lambda e: first_step.set(),
            )  # fmt: skip
            tg.start_soon(cycle)
            await first_step.wait()
            tg.cancel_scope.cancel()

    with structlog.testing.capture_logs() as logs:
        anyio.run(main)
    # The cancellation returned only after the child was gone, ended by SIGTERM (no SIGKILL fallback needed).
    assert _gone(pids[0])
    [stopped] = [e for e in logs if e["event"] == "training.stopped"]
    assert stopped["returncode"] == -signal.SIGTERM
    _assert_only_v1_and_it_loads(store_with_v1, base)


def test_bad_input_is_a_permanent_failure(tmp_path, models_dir):
    no_chat = resolve_base_model("learnerd/tiny-llama-no-chat", cache_dir=models_dir)
    store = AdapterStore(tmp_path)
    cycle = functools.partial(train_cycle, store, "doc", no_chat, ROWS, ENDLESS, num_threads=1)
    with pytest.raises(TrainingFailed, match=r"RowEncodingError: .*no chat template") as info:
        anyio.run(cycle)
    assert info.value.permanent and info.value.returncode == 1
    assert store.list_versions("doc") == [] and store.current("doc") is None
    assert list((tmp_path / "doc" / "versions").iterdir()) == []


def test_the_worker_ends_without_the_interpreters_teardown():
    """After its last event the worker exits at once (``os._exit``): an exit handler registered before it runs
    never runs; what it wrote is flushed. (Its stdin closed at once: the parent is gone, exit status 3.)"""
    script = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('interpreter teardown', file=sys.stderr))\n"
        "runpy.run_module('learnerd.training.worker', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=cli_env()
    )
    assert proc.returncode == 3 and proc.stdout == '{"event": "ready"}\n', proc.stderr
    assert "interpreter teardown" not in proc.stderr


@pytest.mark.slow
def test_kill_9_of_the_daemon_mid_training(store_with_v1, base, models_dir):
    """The whole daemon dies: the orphaned trainer notices and exits, recover() clears its staging."""
    script = textwrap.dedent(
        f"""
        import anyio, functools, sys
        from learnerd.ml.base_model import resolve_base_model
        from learnerd.training.cycle import train_cycle
        from learnerd.store.dlm import TrainingConfig
        from learnerd.ml.rows import TrainingRow
        from learnerd.store.adapters import AdapterStore

        def report(what):
            print(what, flush=True)

        base = resolve_base_model({DEFAULT_BASE_MODEL!r}, cache_dir={str(models_dir)!r})
        rows = [TrainingRow.from_dict(r) for r in {[r.to_dict() for r in NEW_ROWS]!r}]
        config = TrainingConfig(learning_rate=1e-2, max_steps=1_000_000)
        anyio.run(functools.partial(
            train_cycle, AdapterStore({str(store_with_v1.root)!r}), "doc", base, rows, config, num_threads=1,
            on_start=lambda pid: report(f"child {{pid}}"), on_progress=lambda e: report(f"step {{e.step}}"),
        ))
        """
    )
    daemon = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        reports = (line.split() for line in daemon.stdout if line.startswith(("child ", "step ")))  # not log lines
        what, pid = next(reports)
        assert what == "child"
        child = int(pid)
        assert next(reports)[0] == "step"
        daemon.kill()
        daemon.wait()
        deadline = time.monotonic() + 60
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(child), "the orphaned training process kept running"
    finally:
        daemon.kill()
        daemon.stdout.close()
    [staging] = (store_with_v1.root / "doc" / "versions").glob(".staging-*")
    assert [v.name for v in store_with_v1.list_versions("doc")] == ["v0001"]  # invisible to readers
    assert store_with_v1.recover() == [staging]
    _assert_only_v1_and_it_loads(store_with_v1, base)


def test_a_warm_spare_serves_the_next_job_and_is_replaced(tmp_path, base):
    store = AdapterStore(tmp_path)
    pids: list[int] = []

    async def main():
        async with WarmSpare() as spare:
            await spare.refill(wait_ready=True)  # imports done before the job arrives
            first = spare.pid
            cycle = functools.partial(
                train_cycle, store, "doc", base, ROWS, TrainingConfig(learning_rate=1e-2, max_steps=2),
                num_threads=1, on_start=pids.append, spare=spare,
            )  # fmt: skip
            outcome = await cycle()
            replacement = spare.pid
        return first, outcome, replacement

    first, outcome, replacement = anyio.run(main)
    assert pids == [first] and outcome.version.name == "v0001" and outcome.result.steps == 2
    assert replacement not in (None, first)
    assert _gone(first) and _gone(replacement)  # the job's child exited; leaving the block killed the spare


def test_the_training_process_reports_its_peak_memory_and_the_version_records_it(tmp_path, base):
    """The worker's peak resident memory (``getrusage``) comes back in the result and lands in the manifest: the
    figure the 2 GB bound of a SmolLM2 cycle is read from. torch, transformers and peft alone take over 100 MiB."""
    store = AdapterStore(tmp_path)
    config = TrainingConfig(learning_rate=1e-2, max_steps=1)
    outcome = anyio.run(functools.partial(train_cycle, store, "doc", base, ROWS, config, num_threads=1))
    assert outcome.result.peak_rss_mb > 100
    assert outcome.version.metadata().extra["peak_rss_mb"] == outcome.result.peak_rss_mb
