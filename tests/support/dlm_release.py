"""The released dlm (``document-language-model==0.10.0`` from PyPI) in a virtualenv of its own.

dlm's wheel pins the training stack (torch, transformers, trl, datasets); learnerd's tests need only its
document parser, Q/A parser, probe extraction and ``dlm harvest``. So the wheel is installed with
``--no-deps`` beside the few libraries those import (:data:`PARSER_DEPS`), in a virtualenv that learnerd's
own environment never sees, installed once per machine into the artefact cache
(:mod:`tests.support.artefact_cache`; :data:`PARSER_DEPS` are not pinned: clear the cache entry to take newer
ones). ``$LEARNERD_DLM_PYTHON`` names an interpreter that already has it (skips the install).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.artefact_cache import cached, content_key

RELEASE = "document-language-model==0.10.0"
#: What ``dlm.doc``, ``dlm.data``, ``dlm.eval.probes`` and the ``dlm harvest`` command import.
PARSER_DEPS = ("pyyaml", "pydantic", "cbor2", "zstandard", "typer", "rich", "python-ulid", "packaging")

# Run inside dlm's virtualenv: parse a document as dlm does and print its training rows and probes.
_ROWS_SCRIPT = """
import json, sys
from pathlib import Path
from dlm.data import sections_to_rows
from dlm.doc.parser import parse_file
from dlm.eval.probes import extract_probes
parsed = parse_file(Path(sys.argv[1]))
sections = list(parsed.sections)
rows = sections_to_rows(sections)
probes = extract_probes(sections, k=1000)
print(json.dumps({
    "section_ids": [s.section_id for s in sections],
    "chat": [[r["messages"][0]["content"], r["messages"][1]["content"], r["_dlm_section_id"]]
             for r in rows if "messages" in r],
    "probes": [[p.prompt, p.reference, p.section_id] for p in probes],
}))
"""


class DlmUnavailable(RuntimeError):
    """The release could not be installed (no network, no PyPI)."""


@dataclass(frozen=True)
class DlmRelease:
    """A Python interpreter with the released dlm importable."""

    python: Path

    def rows(self, document: Path) -> dict[str, Any]:
        """dlm's view of ``document``: ``section_ids``; ``chat``: ``[question, answer, section id]`` of every
        instruction row (``sections_to_rows``); ``probes``: ``[prompt, reference, section id]``
        (``extract_probes``). Raises AssertionError with dlm's traceback when dlm refuses the document."""
        done = self.run("-c", _ROWS_SCRIPT, str(document))
        assert done.returncode == 0, f"the released dlm refuses {document}:\n{done.stderr}"
        return json.loads(done.stdout)

    def cli(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """``dlm ARGS`` (the release's own command line)."""
        return self.run("-m", "dlm", *map(str, args))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(COLUMNS="200", NO_COLOR="1", HF_HUB_OFFLINE="1")
        return subprocess.run([str(self.python), *args], capture_output=True, text=True, env=env, timeout=300)


def installed() -> DlmRelease:
    """The release in the artefact cache's virtualenv (:func:`install` the first time on this machine), or
    ``$LEARNERD_DLM_PYTHON``'s interpreter.

    Raises:
        DlmUnavailable: pip could not install it (nothing is cached; the next call tries again).
    """
    override = os.environ.get("LEARNERD_DLM_PYTHON")
    if override:
        return DlmRelease(Path(override))
    entry = cached("dlm-release", content_key(RELEASE, *PARSER_DEPS, sys.version), lambda root: install(root / "venv"))
    return DlmRelease(entry / "venv" / "bin" / "python")


def install(root: Path) -> DlmRelease:
    """A virtualenv under ``root`` with :data:`RELEASE` (no dependencies) and :data:`PARSER_DEPS`.

    Raises:
        DlmUnavailable: pip could not install them (its last output lines in the message).
    """
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    for args in (["--no-deps", RELEASE], list(PARSER_DEPS)):
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
            capture_output=True,
            text=True,
            timeout=280,  # both installs within pytest's 600 s limit of the first test that needs them
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise DlmUnavailable(f"pip install {' '.join(args)} failed (no access to PyPI?):\n{tail}")
    return DlmRelease(python)


if __name__ == "__main__":  # pragma: no cover - a manual check: python -m tests.support.dlm_release DIR
    print(install(Path(sys.argv[1])).python)
