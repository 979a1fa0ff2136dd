"""docs/architecture.md's recipe for a reconciler is true: its example module plus one entry in the
controller table is a working, configurable controller fed by what it watches — nothing else is edited."""

from __future__ import annotations

import re
import types
from pathlib import Path

import anyio
import pytest

from learnerd.daemon import controllers
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import config_from_dict
from tests.conftest import REPO_ROOT
from tests.support.daemon import SAMPLE_BLOCKS, append_blocks

ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def recipe_module() -> types.ModuleType:
    """The reconciler recipe's code block, as a module."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    recipe = text[text.index("<!-- recipe: reconciler -->") :]
    code = re.search(r"```python\n(.*?)```", recipe, re.S)
    assert code is not None, "the reconciler recipe shows its module"
    module = types.ModuleType("answer_files_recipe")
    exec(compile(code.group(1), str(ARCHITECTURE), "exec"), module.__dict__)
    return module


def test_the_reconciler_recipe_is_its_module_plus_one_entry_in_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm
) -> None:
    spec = recipe_module().SPEC
    monkeypatch.setattr(controllers, "CONTROLLERS", (*controllers.CONTROLLERS, spec))
    append_blocks(tmp_path / "logs" / "session.jsonl", SAMPLE_BLOCKS)
    raw = {
        "state_dir": "state",
        "log_dirs": ["logs"],
        "docs_dirs": ["docs"],
        "training": {"enabled": False},
        "controllers": {spec.name: {"workers": 3}},
    }
    cfg = config_from_dict(raw, base=tmp_path)
    assert cfg.controller(spec.name).workers == 3, "its [controllers.NAME] table is accepted"

    daemon = Daemon(cfg, embedder=minilm)
    try:
        summary = anyio.run(daemon.run_once)
        assert daemon.controllers[spec.name].workers == 3, "and applied"
    finally:
        daemon.close()
    files = {p.stem: p.read_text() for p in (cfg.state_dir / "answer-files").iterdir()}
    assert files == {block_id: command for block_id, (_, command) in SAMPLE_BLOCKS.items()}
    assert summary.changes[spec.name] == {"written": len(SAMPLE_BLOCKS)}
    assert spec.name in daemon.pipeline, "it drains with the pipeline"
