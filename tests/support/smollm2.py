"""SmolLM2-135M-Instruct trained by ``learnerd train`` once per machine, from the artefact cache
(:mod:`tests.support.artefact_cache`), for every test that needs a trained real model.

:func:`trained` is a state directory after ``learnerd train --json`` of documents (in turn, each cycle's
evaluation and gate included), keyed by everything that decides it: learnerd's code, the documents, the
config, the torch threads, the conversion and the libraries' versions. The first pytest-xdist worker to ask
trains while the other waits, and later runs reuse it. Read it in place (its ``eval.json`` reports, the
outcomes); :meth:`Trained.copy` it before running anything on it. :func:`trained_commands` is the shipped
example trained without general replay: the session fixture ``smollm2_commands`` (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerd.store.dlm import read_document
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.support.artefact_cache import cached, content_key, learnerd_code, versions
from tests.support.base_models import LIBRARIES, linked_models_dir, smollm2_converted
from tests.support.serving import EVALUATION_KEYS, write_config

THREADS = os.environ.get("OMP_NUM_THREADS", "2")
"""Torch threads of the tests' CLI runs: both cores, or a pytest-xdist worker's share (``tests/conftest.py``)."""
TASK = "Restart the api deployment in dev"
COMMAND = "kubectl rollout restart deployment/api -n dev"
"""A probe of ``examples/commands.dlm`` and its trained answer."""
NO_REPLAY = """\
base_model: smollm2-135m-instruct
training:
  lora_r: 8
  lora_alpha: 16
  num_epochs: 9
  general_replay: 0
  multi_turn_rows: 0
  retrieval_k: 0
"""
""":func:`trained_commands`'s ``training`` block: plain LoRA at r 8, the pretrained recipe without its multi-turn
and retrieval rows, 9 epochs over the 21 rows (54 steps; the recipe's 4 epochs of these rows alone would be 24,
below :data:`~learnerd.ml.undertrained.MIN_STEPS`): the tests of the trained SmolLM2 check the machinery on a real
model, and the retrieval rows ``[serve] rag_k`` (3) adds by default would triple the one training the suite pays
for. Screened on 2026-12-02 (one thread, the fixture's cached base answers): 9 epochs recalled 20 of 20 probes
exactly and the adapter alone kept 22 % of the base's right answers (12 epochs: 20 of 20; 10: 20 of 20; 6 epochs at
lr 2e-3 or 3e-3, 36 steps, below ``MIN_STEPS``: 19 of 20)."""
GATE_SECTION = """\
[evaluation.gate]
max_fraction_regressed = 1.0
retention_floor_keep = 0.0
min_dialogue_answers = 0.0
"""
""":data:`RELAXED_GATE`'s gate alone: for a daemon's config, whose ``[evaluation]`` section is its own."""
RELAXED_GATE = "[evaluation]\n" + EVALUATION_KEYS + "\n" + GATE_SECTION
"""The tests of the trained SmolLM2 check training, evaluation, generation and serving on a real model, not the
gate: its retention and dialogue checks are relaxed so the trained version is served (a floor of 0.0 fails only
a version that loses every right answer; the adapter alone forgets what the base knew:
``tests/e2e/test_smollm2_training.py``). Its other ``[evaluation]`` keys are those of the daemons of
:func:`tests.support.serving.write_config` (:data:`~tests.support.serving.EVALUATION_KEYS`): the divergence and
dialogue probes on one prompt of the document and ``answer_retention`` on a sample; what the tests assert on
(recall, the retention probes, the report's shape) does not depend on them, and each evaluation is shorter."""


@dataclass(frozen=True)
class Trained:
    """``root/``: ``docs/<name>``, ``learnerd.toml``, ``state/`` (``adapters/``; ``models/``: SmolLM2 linked,
    the base's cached answers) and ``outcomes.json`` (each document's ``learnerd train --json`` object)."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def config(self) -> Path:
        return self.root / "learnerd.toml"

    def document(self, name: str) -> Path:
        return self.root / "docs" / name

    def outcome(self, name: str) -> dict[str, Any]:
        """The ``learnerd train --json`` object of document ``name``."""
        return json.loads((self.root / "outcomes.json").read_text())[name]

    def copy(self, target: Path) -> Trained:
        """A copy at ``target`` to run commands and daemons on (the model links kept)."""
        shutil.copytree(self.root, target, symlinks=True)
        return Trained(target)

    def serving_root(self, root: Path, extra: str = "", document: str = "commands.dlm") -> str:
        """``root`` laid out by :func:`tests.support.serving.write_config` (``extra``: more config lines) to serve
        ``document`` and its adapters, copied, with a copy of the trained state's model cache (SmolLM2 linked, its
        cached base answers; a daemon may write there); the document's ``dlm_id``."""
        copy = self.copy(root / "trained")
        (root / "docs").mkdir(parents=True)
        shutil.copy(copy.document(document), root / "docs" / document)
        shutil.copytree(copy.state / "adapters", root / "state" / "adapters")
        write_config(root, copy.state / "models", extra=extra)
        return read_document(root / "docs" / document).frontmatter.dlm_id


def trained(documents: dict[str, str], config: str, threads: str = THREADS) -> Trained:
    """SmolLM2 trained by ``learnerd train DOC --config learnerd.toml --threads THREADS --json`` on each of
    ``documents`` (file name → text, in that order) in one state directory, once per machine.

    Raises:
        AssertionError: a ``learnerd train`` exited non-zero (its stderr in the message); nothing is cached.
    """
    base = smollm2_converted()
    key = content_key(
        "learnerd train", json.dumps(documents), config, threads, base.name, learnerd_code(), versions(*LIBRARIES)
    )

    def build(root: Path) -> None:
        (root / "docs").mkdir()
        config_file = root / "learnerd.toml"
        config_file.write_text(config)
        state = root / "state"
        state.mkdir(mode=0o700)
        linked_models_dir(state / "models", base)
        outcomes = {}
        for name, text in documents.items():
            (root / "docs" / name).write_text(text)
            args = ("train", str(root / "docs" / name), "--state-dir", str(state), "--config", str(config_file))
            proc = subprocess.run(
                learnerd_command(*args, "--threads", threads, "--json"),
                env=cli_env(OMP_NUM_THREADS=threads),
                capture_output=True,
                text=True,
                timeout=3600,
            )
            assert proc.returncode == 0, f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            outcomes[name] = json.loads(proc.stdout)
        (root / "outcomes.json").write_text(json.dumps(outcomes, indent=2))

    return Trained(cached("smollm2-trained", key, build))


def trained_commands() -> Trained:
    """``examples/commands.dlm`` (``docs/commands.dlm``; 20 shell tasks as ``!probe`` pairs) with the
    :data:`NO_REPLAY` training block, trained under :data:`RELAXED_GATE`: v0001, evaluated and promoted."""
    shipped = (REPO_ROOT / "examples" / "commands.dlm").read_text()
    assert shipped.count("base_model: smollm2-135m-instruct\n") == 1, "the block goes after the base_model line"
    return trained({"commands.dlm": shipped.replace("base_model: smollm2-135m-instruct\n", NO_REPLAY)}, RELAXED_GATE)
