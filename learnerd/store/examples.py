"""Examples: (query, answer) pairs learned from blocks. Example id = block id (foyle TN006)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from learnerd.store.db import Migration

MIGRATIONS = (
    Migration(
        "examples",
        1,
        """
        CREATE TABLE examples (
            id         TEXT PRIMARY KEY,
            query      TEXT NOT NULL,
            answer     TEXT NOT NULL,
            language   TEXT NOT NULL DEFAULT '',
            updated_at REAL NOT NULL
        )
        """,
    ),
)

EXAMPLE_SOURCE_PREFIX = "learnerd/"
"""An example's probe section carries the auto-harvest marker source ``learnerd/<example id>``
(:mod:`learnerd.reconcilers.probes` writes it; manifests and ``learnerd why`` read it back)."""


@dataclass(frozen=True)
class Example:
    """``query`` is the context a person had (markdown before the cell); ``answer`` the cell they ran."""

    id: str
    query: str
    answer: str
    language: str = ""
    updated_at: float = 0.0

    def same_content(self, other: Example | None) -> bool:
        return other is not None and (self.query, self.answer, self.language) == (
            other.query,
            other.answer,
            other.language,
        )


def get_example(conn: sqlite3.Connection, example_id: str) -> Example | None:
    """The stored example ``example_id``, or None."""
    row = conn.execute(
        "SELECT id, query, answer, language, updated_at FROM examples WHERE id = ?", (example_id,)
    ).fetchone()
    return Example(*row) if row is not None else None


def get_examples(conn: sqlite3.Connection, ids: list[str]) -> dict[str, Example]:
    """The stored examples among ``ids``, by id (missing ids are absent from the result)."""
    found: dict[str, Example] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = conn.execute(
            f"SELECT id, query, answer, language, updated_at FROM examples WHERE id IN ({','.join('?' * len(chunk))})",
            chunk,
        )
        for row in rows:
            found[row[0]] = Example(*row)
    return found


def list_examples(conn: sqlite3.Connection) -> list[Example]:
    """Every stored example, ordered by id."""
    rows = conn.execute("SELECT id, query, answer, language, updated_at FROM examples ORDER BY id")
    return [Example(*row) for row in rows]


def put_example(conn: sqlite3.Connection, example: Example) -> None:
    """Insert or replace ``example`` (its ``updated_at`` is stored as given)."""
    conn.execute(
        "INSERT OR REPLACE INTO examples (id, query, answer, language, updated_at) VALUES (?, ?, ?, ?, ?)",
        (example.id, example.query, example.answer, example.language, example.updated_at),
    )


def delete_example(conn: sqlite3.Connection, example_id: str) -> bool:
    """Delete ``example_id``; True if it existed."""
    return conn.execute("DELETE FROM examples WHERE id = ?", (example_id,)).rowcount > 0


def list_example_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM examples ORDER BY id")]


def count_examples(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM examples").fetchone()[0]
