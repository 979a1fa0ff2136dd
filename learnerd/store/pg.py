"""The PostgreSQL backend: a connection with the small part of ``sqlite3.Connection``'s interface the
store modules use, so the same store modules and reconcilers run over either backend.

The store modules write portable SQL in SQLite's dialect; :func:`translate` rewrites the three things
PostgreSQL spells differently:

* ``?`` placeholders (``qmark``) become ``%s`` (psycopg's ``format`` paramstyle);
* ``INSERT OR REPLACE INTO t (cols) VALUES (…)`` becomes ``INSERT … ON CONFLICT (primary key) DO UPDATE
  SET col = EXCLUDED.col`` for every other listed column (every caller lists every column, so the row
  ends the same as SQLite's delete-and-insert);
* ``BEGIN IMMEDIATE`` becomes ``BEGIN``; where SQLite's database lock serialised a read-merge-write, the
  store takes an advisory lock first (:func:`learnerd.store.locks.lock_for_merge`).

and :func:`translate_ddl` maps the migration scripts' column types: ``INTEGER`` → ``BIGINT`` (inode
numbers and byte offsets pass 2³¹), ``REAL`` → ``DOUBLE PRECISION`` (epoch seconds need 53 bits),
``BLOB`` → ``BYTEA`` (psycopg returns ``bytes`` for both).

Rows are :class:`Row`: index and column-name access and ``keys()``, like ``sqlite3.Row``.

The connection runs in autocommit mode, like the SQLite one (``isolation_level=None``): group writes
with :meth:`PgConnection.transaction`. A connection the server dropped (restart, network partition) is
replaced by a new one at the next statement outside a transaction; the statement in flight raises
``psycopg.OperationalError``, which callers treat like any database failure (the reconcile is retried
with backoff; the analyzer's batch rolls back and is read again).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import RowMaker

#: Primary key of every table written with ``INSERT OR REPLACE`` (the ``ON CONFLICT`` target).
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "blocks": ("id",),
    "examples": ("id",),
    "embeddings": ("example_id",),
    "watermarks": ("host", "path"),
    "foyle_traces": ("trace_id",),
    "assistant_sessions": ("source", "session_key"),
    "rejected_attempts": ("block_id", "attempt_id"),
}

_UPSERT_RE = re.compile(r"^\s*INSERT OR REPLACE INTO (\w+) \(([^)]*)\)(.*)$", re.S | re.I)
_DDL_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "BLOB": "BYTEA"}
_DDL_RE = re.compile(r"\b(" + "|".join(_DDL_TYPES) + r")\b")

DATABASE_FAILURES: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InternalError,
    psycopg.InterfaceError,
)
"""psycopg's exceptions that mean the server or the connection failed, not the data (a line whose text
PostgreSQL refuses — a NUL character, say — raises ``psycopg.DataError`` and is the input's fault)."""
ERRORS = psycopg.Error
"""The base of every psycopg exception."""

CONNECT_TIMEOUT_S = 10
"""Seconds to wait for the server when connecting (libpq's ``connect_timeout``)."""


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """``sql`` in SQLite's dialect → PostgreSQL's (see the module docstring).

    Raises:
        ValueError: an ``INSERT OR REPLACE`` into a table missing from :data:`PRIMARY_KEYS`.
    """
    if sql.strip().upper() == "BEGIN IMMEDIATE":
        return "BEGIN"
    match = _UPSERT_RE.match(sql)
    if match:
        table, columns, rest = match.group(1), match.group(2), match.group(3)
        if table not in PRIMARY_KEYS:
            raise ValueError(f"INSERT OR REPLACE into {table}: its primary key is not in PRIMARY_KEYS")
        key = PRIMARY_KEYS[table]
        names = [c.strip() for c in columns.split(",")]
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c.strip('"') not in key)
        sql = f"INSERT INTO {table} ({columns}){rest} ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    return sql.replace("?", "%s")


def translate_ddl(script: str) -> str:
    """A migration script's column types in PostgreSQL's names (see the module docstring)."""
    return _DDL_RE.sub(lambda m: _DDL_TYPES[m.group(1)], script)


class Row(tuple):
    """A result row: ``row[0]``, ``row["name"]``, ``row.keys()`` and ``dict(row)`` (as ``sqlite3.Row``)."""

    __slots__ = ()
    _names: tuple[str, ...] = ()

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return tuple.__getitem__(self, self._names.index(item))
        return tuple.__getitem__(self, item)

    def keys(self) -> list[str]:
        return list(self._names)


@functools.lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    return type("Row", (Row,), {"__slots__": (), "_names": names})


def _row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    return _row_class(tuple(d.name for d in cursor.description or ()))


class PgConnection:
    """A PostgreSQL connection speaking the store modules' SQLite dialect (see the module docstring).

    Args:
        url: a libpq URL (``postgresql://user@host:port/db?…``).

    Raises:
        psycopg.OperationalError: the server cannot be reached.
    """

    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn = self._connect()
        self._in_transaction = False

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True, row_factory=_row_factory, connect_timeout=CONNECT_TIMEOUT_S)

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The underlying psycopg connection (reconnected first if the server dropped it)."""
        if self._conn.closed and not self._in_transaction:
            self._conn = self._connect()
        return self._conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """Run one statement; returns the cursor (``fetchone``, ``fetchall``, ``fetchmany``, iteration,
        ``rowcount``)."""
        return self.raw.execute(translate(sql), tuple(params) or None)

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> psycopg.Cursor[Any]:
        """Run one statement per parameter tuple; ``rowcount`` is the total of rows affected."""
        cursor = self.raw.cursor()
        cursor.executemany(translate(sql), list(seq_of_params))
        return cursor

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        """``BEGIN`` … ``COMMIT``, or ``ROLLBACK`` if the block raises (skipped when the connection is gone)."""
        self.execute("BEGIN")
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            if not self._conn.closed:
                with contextlib.suppress(psycopg.OperationalError):
                    self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")
        finally:
            self._in_transaction = False

    def close(self) -> None:
        self._conn.close()
