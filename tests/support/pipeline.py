"""Helpers for end-to-end tests of the pipeline: run the CLI, snapshot the tables (on either backend)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.tldr_to_blocklog import convert
from learnerd.store import db
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.support.artefact_cache import cached, content_key, learnerd_code
from tests.support.in_process import run_cli_here


def run_cli(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``learnerd ARGS`` in a subprocess; with ``check``, fail with its stderr on a non-zero exit."""
    proc = subprocess.run(learnerd_command(*args), env=cli_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def store_args(store_url: str | None) -> list[str]:
    """``--store-url URL`` for a PostgreSQL store, nothing for the default SQLite file."""
    return ["--store-url", store_url] if store_url else []


def run_once(
    state: Path, logs: Path, *extra: str, train: bool = False, store_url: str | None = None, here: bool = False
) -> dict:
    """``learnerd run --once --json`` over ``logs`` with state (and docs) in ``state``; the summary.
    The pipeline tests do not train adapters (``--no-train``) unless ``train``. ``store_url``: a
    PostgreSQL database instead of ``state``'s SQLite file. ``here``: in this process
    (:func:`tests.support.in_process.run_cli_here`), for a run that is not itself the subject (a reference state,
    a step towards one) and whose process start (torch's import) would be most of its cost."""
    args = (
        "run", "--once", "--json", "--log-level", "warning",
        "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(state / "docs"),
        *([] if train else ["--no-train"]), *store_args(store_url), *extra,
    )  # fmt: skip
    return json.loads((run_cli_here(*args) if here else run_cli(*args)).stdout)


def open_store(state: Path, store_url: str | None = None) -> Any:
    """A connection to ``state``'s SQLite file (read-only), or to ``store_url``."""
    return db.connect(store_url) if store_url else db.connect(state / "learnerd.db", readonly=True)


def table_rows(state: Path, sql: str, store_url: str | None = None) -> list[tuple]:
    """All rows of ``sql`` in ``state``'s store (or ``store_url``'s), as tuples."""
    conn = open_store(state, store_url)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def snapshot(state: Path, store_url: str | None = None) -> dict[str, list[tuple]]:
    """Every row of the blocks, examples and embeddings tables, timestamps included, sorted by id."""
    return {
        "blocks": table_rows(state, "SELECT * FROM blocks ORDER BY id", store_url),
        "examples": table_rows(state, "SELECT * FROM examples ORDER BY id", store_url),
        "embeddings": table_rows(state, "SELECT * FROM embeddings ORDER BY example_id", store_url),
    }


@dataclass(frozen=True)
class TldrRun:
    """A fixed tldr subset as block logs (``logs``, ``blocks`` blocks, from
    :func:`benchmarks.tldr_to_blocklog.convert` with a ``limit``) and one uninterrupted ``learnerd run
    --once --no-train`` over them on SQLite: its ``state`` directory (docs in ``state/docs``) and ``summary``."""

    logs: Path
    blocks: int
    state: Path
    summary: dict[str, Any]


def tldr_run(tldr: Path, limit: int = 1000, here: bool = False) -> TldrRun:
    """Convert the first ``limit`` blocks of ``tldr`` (the peer data's ``tldr`` folder) into ``logs`` and run once
    over them into ``state`` (:class:`TldrRun`), once per machine: an entry of the artefact cache
    (:mod:`tests.support.artefact_cache`), keyed by ``limit``, learnerd's code, the tldr pages and the code of both
    steps. Read it, copy it to change it. ``here``: a first build runs in this process (:func:`run_once`), for a
    caller whose subject is not that run."""

    def build(root: Path) -> None:
        blocks = convert(tldr, root / "logs", limit=limit)
        summary = run_once(root / "state", root / "logs", here=here)
        (root / "run.json").write_text(json.dumps({"blocks": blocks, "summary": summary}))

    steps = (Path(__file__), REPO_ROOT / "benchmarks" / "tldr_to_blocklog.py")
    key = content_key("tldr run", f"limit {limit}", learnerd_code(), tldr, *steps)
    root = cached("tldr-run", key, build)
    run = json.loads((root / "run.json").read_text())
    return TldrRun(root / "logs", run["blocks"], root / "state", run["summary"])
