"""``ctl pause`` and ``ctl drain`` that mean it, on a real daemon (admin socket, ``learnerd ctl``) and a real
tiny adapter: a paused evaluation starts nothing at a restart — not the start-up resync's key, not in the
drain — and a drain during an evaluation cancels it at its next batch instead of waiting for it; the
cancelled evaluation wrote nothing, and the next start evaluates that version.

Log events are captured in-process (``structlog.testing.capture_logs``); the CLI configures logging, so
inside a capture it runs as a subprocess (``ctl drain --wait``) or the admin API is called directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from unittest.mock import ANY

import anyio
import pytest
import structlog

from learnerd.cmd.main import main
from learnerd.daemon.config import Config
from learnerd.eval.history import report_path
from learnerd.store.adapters import AdapterStore
from tests.conftest import cli_env, learnerd_command
from tests.qa_pairs import QA_PAIRS
from tests.support.daemon import daemon_config, eventually, get_json, post_json, running_service
from tests.support.evaluation import qa_document, state_with_models
from tests.support.training import train_document

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("one_torch_thread", "restore_log_level")]

EVALUATION = "evaluation"
#: Generous: a drain or a stop that waits for a whole evaluation (or the 30 s drain timeout) is a bug, but
#: a shared 2-core machine may be slow. The time is measured and printed, not asserted tightly.
PROMPT_S = 20.0


async def learnerd(capsys, cfg: Config, *argv: str) -> str:
    """``learnerd ARGV --state-dir STATE`` in a worker thread (the CLI runs its own event loop); its stdout."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(main, [*argv, "--state-dir", str(cfg.state_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


async def learnerd_process(cfg: Config, *argv: str) -> str:
    """``learnerd ARGV --state-dir STATE`` in a subprocess; its stdout."""
    argv = (*argv, "--state-dir", str(cfg.state_dir))
    proc = await anyio.run_process(learnerd_command(*argv), env=cli_env(), check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def names(logs: list[dict]) -> list[str]:
    return [e["event"] for e in logs]


async def test_a_paused_evaluation_starts_nothing_and_a_drain_cancels_a_running_one(
    short_root: Path, minilm, models_dir: Path, capsys
):
    state_with_models(short_root, models_dir)
    doc = short_root / "docs" / "qa.dlm"
    doc.parent.mkdir()
    doc.write_text(qa_document(QA_PAIRS, epochs=1, per_section=4))
    cfg = daemon_config(short_root)
    cfg.evaluation.num_threads = 1
    cfg.evaluation.null_runs = 20  # a few seconds of evaluation on the tiny model, for the drain to interrupt

    # 1. Pause the evaluation on a running daemon (the document has no adapter yet: nothing to evaluate).
    async with running_service(cfg, minilm):
        assert "evaluation: paused" in await learnerd(capsys, cfg, "ctl", "pause", EVALUATION)
    assert json.loads(cfg.layout.paused_controllers.read_text()) == [EVALUATION]

    # 2. While it is down, an adapter version is committed: the next start's resync lists the document.
    outcome = await train_document(AdapterStore(cfg.layout.root / "adapters"), doc, models_dir)
    report = report_path(outcome.version)

    # 3. Restart: the evaluation stays paused and starts nothing, neither at start-up nor in the drain.
    with structlog.testing.capture_logs() as logs:
        async with running_service(cfg, minilm) as running, running.session() as session:
            status = (await get_json(session, "/status"))["controllers"][EVALUATION]
            assert status["paused"] and status["queue_depth"] == 1, "the resync queued the document, nothing took it"
            assert status["in_flight"] == [] and status["reconciles"] == 0
            stopping = time.monotonic()
        stopped_s = time.monotonic() - stopping
    assert "controller paused before the restart stays paused (learnerd ctl resume)" in names(logs)
    assert "evaluation.started" not in names(logs) and not report.exists()
    assert "drain timed out; cancelling in-flight work" not in names(logs)
    assert stopped_s < PROMPT_S, f"a stop with a paused evaluation took {stopped_s:.1f} s"

    # 4. Restart, resume: the evaluation starts; a drain during it cancels it at its next batch.
    with structlog.testing.capture_logs() as logs:
        async with running_service(cfg, minilm) as running, running.session() as session:
            assert await post_json(session, "/resume", {"controller": EVALUATION}) == (200, {"paused": ANY})

            async def evaluating() -> bool:
                return "evaluation.progress" in names(logs)

            await eventually(evaluating, what="the evaluation is under way")
            draining = time.monotonic()
            assert "exited" in await learnerd_process(cfg, "ctl", "drain", "--wait")
            drain_s = time.monotonic() - draining
    events = names(logs)
    assert "evaluation.cancelled" in events and "reconcile cancelled: the controller is shutting down" in events
    assert "evaluation.finished" not in events and not report.exists(), "a cancelled evaluation writes nothing"
    assert "drain timed out; cancelling in-flight work" not in events
    print(f"ctl drain --wait during an evaluation of {len(QA_PAIRS)} probes (tiny model): {drain_s:.2f} s")
    assert drain_s < PROMPT_S, f"the drain took {drain_s:.1f} s"

    # 5. The next start lists the document again and evaluates the version the drain cancelled.
    async def evaluated() -> bool:
        return report.exists()

    with structlog.testing.capture_logs() as logs:
        async with running_service(cfg, minilm):
            await eventually(evaluated, what="the cancelled version evaluated at the next start")
    assert next(e for e in logs if e["event"] == "resync")[EVALUATION] == 1
    assert "evaluation.finished" in names(logs)
