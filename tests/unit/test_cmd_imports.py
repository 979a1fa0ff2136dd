"""``learnerd --help`` stays fast: it imports none of the model libraries (torch, transformers, peft), no
numpy and at most :data:`MAX_HELP_MODULES` modules of learnerd; the composed config loads only settings
modules, which are leaves."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "transformers", "peft", "sentence_transformers", "numpy")
MAX_HELP_MODULES = 30
"""learnerd modules ``learnerd --help`` may load: the 15 subcommands and what their parsers need (26 today)."""
LIGHT_HELPERS = ("learnerd.training.checkpoint", "learnerd.store.atomic")
"""Not settings, loaded by the config: ``[training] checkpoint_every_s``'s default (``DEFAULT_EVERY_S``) and
the atomic writes its module imports; neither imports numpy or the store's machinery."""


def loaded_after(code: str) -> tuple[str, dict[str, list[str]]]:
    """Run ``code`` in a fresh interpreter; its stdout, and the heavy modules, the learnerd modules and the
    learnerd packages it left loaded."""
    probe = f"""
import json, sys
{code}
print("\\nloaded:" + json.dumps({{
    "heavy": [m for m in {HEAVY!r} if m in sys.modules],
    "learnerd": sorted(m for m in sys.modules if m == "learnerd" or m.startswith("learnerd.")),
    "packages": sorted(m for m, mod in sys.modules.items() if m.startswith("learnerd") and hasattr(mod, "__path__")),
}}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    out, loaded = proc.stdout.rsplit("\nloaded:", 1)
    return out, json.loads(loaded)


def test_help_imports_no_model_library_nor_numpy() -> None:
    out, loaded = loaded_after(
        "from learnerd.cmd.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert "usage: learnerd" in out, out
    assert loaded["heavy"] == [], f"`learnerd --help` imported {loaded['heavy']}"
    assert "learnerd.cmd.why" in loaded["learnerd"], "every subcommand registers its parser"
    assert len(loaded["learnerd"]) <= MAX_HELP_MODULES, (
        f"`learnerd --help` loaded {len(loaded['learnerd'])} learnerd modules: {loaded['learnerd']}"
    )


def test_settings_modules_are_leaves() -> None:
    _, loaded = loaded_after("import learnerd.daemon.config")
    assert loaded["heavy"] == [], f"the config imported {loaded['heavy']}"
    others = [
        m
        for m in loaded["learnerd"]
        if m not in loaded["packages"]
        and m.rsplit(".", 1)[-1] != "settings"
        and m not in ("learnerd.sections", "learnerd.daemon.config", *LIGHT_HELPERS)
    ]
    assert others == [], f"settings modules import more than settings: {others}"
    assert "learnerd.analyzer.settings" in loaded["learnerd"] and "learnerd.eval.settings" in loaded["learnerd"]
