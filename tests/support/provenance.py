"""A state directory with three adapter versions of ``learned.dlm`` whose provenance is known, for the tests
of ``learnerd versions`` and ``learnerd why`` (the session fixture ``three_versions`` of ``tests/e2e/conftest.py``).

Built once per machine into the artefact cache (:mod:`tests.support.artefact_cache`; read it, never change it)
from the shipped example log (blocks ``nb-k8s-1`` … ``nb-k8s-4``; each block's
``executed`` event is on lines 3 and 6 of its six-line file), each step ``learnerd run --once --no-train``
(log → block → example → probe section; the daemon also evaluates the version trained the step before) then
``learnerd train`` (the built-in tiny model), which evaluates each version and promotes it (the gate), so
every version has a report:

* v0001 (fresh): ``a.jsonl`` — nb-k8s-1 (line 3) and nb-k8s-2 (line 6);
* v0002 (incremental): ``b.jsonl`` — nb-k8s-3 (line 3) and nb-k8s-4 (line 6) added, the rest replayed;
* v0003 (fresh): ``c.jsonl`` line 1 re-runs nb-k8s-2 with exit status 1, so its example is deleted and
  the adapter retrained without it (removed).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from learnerd.store.dlm import read_document
from tests.conftest import REPO_ROOT
from tests.support.artefact_cache import cached, content_key, learnerd_code, versions
from tests.support.base_models import LIBRARIES, linked_models_dir, tiny_models
from tests.support.evaluation import QUICK_EVALUATION
from tests.support.in_process import run_cli_here
from tests.support.pipeline import run_once

SHIPPED_LOG = REPO_ROOT / "examples" / "logs" / "assistant.jsonl"

FAILED_RERUN = {
    "learnerd": 1,
    "type": "executed",
    "block_id": "nb-k8s-2",
    "time": 1763709999.0,
    "cell": {"kind": "code", "language": "bash", "text": "kubectl logs -f deploy/api -n dev"},
    "exit_code": 1,
}


@dataclass(frozen=True)
class ThreeVersions:
    """The state directory, its logs, the document and its ``dlm_id``, and each ``learnerd train``'s stdout."""

    state: Path
    logs: Path
    document: Path
    dlm_id: str
    train_outputs: tuple[str, ...]

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``learnerd ARGS --state-dir STATE``, in this process (:func:`tests.support.in_process.run_cli_here`: the
        tests run it many times; the build below runs its steps in this process too, the commands a person runs:
        ``run --once`` and ``train`` are proven as subprocesses elsewhere, and a process start, torch's import, was most
        of a step's cost)."""
        return run_cli_here(*args, "--state-dir", str(self.state), check=check)


def cached_three_versions() -> ThreeVersions:
    """The state of the module docstring, from the artefact cache: keyed by learnerd's code, the shipped log, this
    module (the steps) and the libraries' versions."""
    key = content_key(
        "three versions", QUICK_EVALUATION, learnerd_code(), SHIPPED_LOG, Path(__file__), versions(*LIBRARIES)
    )
    root = cached("three-versions", key, _build)
    document = root / "state" / "docs" / "learned.dlm"
    outputs = tuple(json.loads((root / "train-outputs.json").read_text()))
    return ThreeVersions(root / "state", root / "logs", document, read_document(document).frontmatter.dlm_id, outputs)


def _build(root: Path) -> None:
    """Build the state under ``root`` (the module docstring), each ``learnerd train``'s stdout in
    ``train-outputs.json``; the built-in models linked from the artefact cache."""
    logs, state = root / "logs", root / "state"
    logs.mkdir()
    state.mkdir(mode=0o700)
    linked_models_dir(state / "models", tiny_models())
    config = root / "config.toml"
    config.write_text(QUICK_EVALUATION)
    shipped = SHIPPED_LOG.read_text().splitlines(keepends=True)
    document = state / "docs" / "learned.dlm"
    outputs = []
    for name, lines in (
        ("a.jsonl", shipped[0:6]),
        ("b.jsonl", shipped[6:12]),
        ("c.jsonl", [json.dumps(FAILED_RERUN) + "\n"]),
    ):
        (logs / name).write_text("".join(lines))
        run_once(state, logs, "--config", str(config), here=True)  # (it evaluates the version the last step trained)
        trained = run_cli_here(
            "train", str(document), "--config", str(config), "--state-dir", str(state), "--threads", "1"
        )
        outputs.append(trained.stdout)
    (root / "train-outputs.json").write_text(json.dumps(outputs))
