"""The assistant-log inputs the samples lack as files: atuin's ``history.db`` built from the peer data's
composed SQL, and the OpenTelemetry GenAI fixture (tests/fixtures/otel-genai, composed from the spec)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

OTEL_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "otel-genai" / "ops-assistant.otlp.jsonl"


def build_history(peer_data: Path, directory: Path) -> Path:
    """``directory/history.db`` made from ``assistant-logs/atuin/history-composed.sql`` (atuin's schema, 20 rows)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "history.db"
    with sqlite3.connect(path) as db:
        db.executescript((peer_data / "assistant-logs" / "atuin" / "history-composed.sql").read_text())
    return path
