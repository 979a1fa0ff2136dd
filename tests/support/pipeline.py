"""Helpers for end-to-end tests of the pipeline: run the CLI, snapshot the tables."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from tests.conftest import cli_env, learnerd_command


def run_cli(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``learnerd ARGS`` in a subprocess; with ``check``, fail with its stderr on a non-zero exit."""
    proc = subprocess.run(learnerd_command(*args), env=cli_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def run_once(state: Path, logs: Path, *extra: str, train: bool = False) -> dict:
    """``learnerd run --once --json`` over ``logs`` with state (and docs) in ``state``; the summary.
    The pipeline tests do not train adapters (``--no-train``) unless ``train``."""
    proc = run_cli(
        "run", "--once", "--json", "--log-level", "warning",
        "--state-dir", str(state), "--log-dir", str(logs), "--docs-dir", str(state / "docs"),
        *([] if train else ["--no-train"]), *extra,
    )  # fmt: skip
    return json.loads(proc.stdout)


def table_rows(db_path: Path, sql: str) -> list[tuple]:
    """All rows of ``sql`` (read-only connection), as tuples."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def snapshot(state: Path) -> dict[str, list[tuple]]:
    """Every row of the blocks, examples and embeddings tables, timestamps included, sorted by id."""
    db = state / "learnerd.db"
    return {
        "blocks": table_rows(db, "SELECT * FROM blocks ORDER BY id"),
        "examples": table_rows(db, "SELECT * FROM examples ORDER BY id"),
        "embeddings": table_rows(db, "SELECT * FROM embeddings ORDER BY example_id"),
    }
