"""The database: SQLite (a file, the default) or PostgreSQL (a ``postgresql://`` URL, for a fleet of
replicas; see docs/fleet.md and :mod:`learnerd.store.pg`): connection settings, and the machinery of the
migrations.

One file, WAL mode, ``synchronous=NORMAL``: a committed transaction survives a process crash
(``kill -9``); after a power loss the newest transactions may roll back, but always as a whole, and
since the analyzer commits each batch of blocks together with the watermark that covers them, a
rollback only means those log lines are read again.

One schema for both backends, owned table by table: each store module declares its tables' DDL as its
``MIGRATIONS``, a tuple of :class:`Migration` named ``(name, number)`` — ``("suggestions", 1)``,
``("suggestions", 2)``, … — in the SQL both engines accept (PostgreSQL gets its column type names through
:func:`learnerd.store.pg.translate_ddl`); :data:`learnerd.store.schema.MODULES` is the order the modules'
migrations apply in. The database records each migration applied, by name, in ``schema_migrations (name,
number, applied_at)``, written in the transaction that applies the migration, so a crash leaves a migration
applied and recorded, or neither. On SQLite :func:`connect` applies the missing migrations itself (one
process owns the file). On PostgreSQL only :func:`migrate` (``learnerd db migrate``) applies them, under an
advisory lock, so replicas started together cannot race; :func:`connect` refuses a database that lacks one.
Both refuse a database that records a migration this learnerd does not declare (a newer learnerd's).

A database made before migrations had names (learnerd up to commit 537b866) records one version number, 1
to 9: SQLite's ``PRAGMA user_version``, PostgreSQL's ``schema_migrations (version, applied_at)``.
:data:`NUMBERED` says which named migrations each version holds; the first migration of such a database
rewrites its record by name (on PostgreSQL keeping each version's ``applied_at``), once, then proceeds as
above. SQLite's ``user_version`` then reads :data:`NAMED`, so a learnerd of that time refuses the file as
newer than itself.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

MigrationKey = tuple[str, int]
"""A migration's name and number, as ``schema_migrations`` records it: ``("suggestions", 1)``."""


@dataclass(frozen=True)
class Migration:
    """One change to the tables of the store module that declares it, recorded as :attr:`key`.

    ``sql``: statements separated by ``;``, in the SQL both backends accept (column types ``INTEGER``,
    ``REAL``, ``TEXT``, ``BLOB``). A shipped migration is never edited: a further change is the next number.
    """

    name: str
    number: int
    sql: str

    @property
    def key(self) -> MigrationKey:
        return (self.name, self.number)


class MigrationConflict(ValueError):
    """Two modules declare one migration name, a module declares a migration twice, or a name's numbers do
    not run 1, 2, … in order."""


def collect(modules: Sequence[ModuleType]) -> tuple[Migration, ...]:
    """Every module's ``MIGRATIONS``, in the modules' order: the order they apply in.

    A name belongs to the one module that declares it; its numbers run 1, 2, … in declaration order.

    Raises:
        MigrationConflict: the rules above broken, naming the modules and migration concerned.
    """
    owners: dict[str, str] = {}
    last: dict[str, int] = {}
    migrations: list[Migration] = []
    for module in modules:
        for migration in module.MIGRATIONS:
            name, number = migration.key
            owner = owners.setdefault(name, module.__name__)
            if owner != module.__name__:
                raise MigrationConflict(
                    f"migration {migration.key!r} of {module.__name__}: the name {name!r} is {owner}'s"
                    " (each module names its own migrations)"
                )
            previous = last.get(name, 0)
            if number != previous + 1:
                raise MigrationConflict(
                    f"{module.__name__}: migration {migration.key!r} comes after {(name, previous)!r}"
                    " (a name's numbers run 1, 2, … in order, each once)"
                )
            last[name] = number
            migrations.append(migration)
    return tuple(migrations)


def declared() -> tuple[Migration, ...]:
    """This learnerd's migrations in the order they apply (:data:`learnerd.store.schema.MIGRATIONS`)."""
    from learnerd.store import schema

    return schema.MIGRATIONS


#: The named migrations each version of a numbered record holds (learnerd up to commit 537b866 applied
#: version N's as one script). Frozen: new migrations have names only.
NUMBERED: dict[int, tuple[MigrationKey, ...]] = {
    1: (("blocks", 1), ("examples", 1), ("embeddings", 1), ("watermarks", 1), ("foyle_traces", 1)),
    2: (("watermarks", 2),),
    3: (("blocks", 2),),
    4: (("watermarks", 3), ("fleet", 1)),
    5: (("assistant_sessions", 1),),
    6: (("tombstones", 1),),
    7: (("blocks", 3), ("suggestions", 1)),
    8: (("blocks", 4),),
    9: (("fleet", 2),),
}

#: SQLite's ``PRAGMA user_version`` of a database recorded by name: above every numbered version.
NAMED = len(NUMBERED) + 1

#: The advisory lock key :func:`migrate` holds while it migrates (any constant; "lrnd" in ASCII).
MIGRATION_LOCK = 0x6C726E64


class SchemaError(RuntimeError):
    """The database's schema is not this learnerd's: it records a migration this learnerd does not declare (a
    newer learnerd's), or (PostgreSQL) lacks one of this learnerd's, not yet migrated."""


class StoreUnavailable(RuntimeError):
    """The PostgreSQL server cannot be reached (or refused the connection)."""


def is_postgres(target: str | Path) -> bool:
    """True when ``target`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``), not a SQLite path."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redact(target: str | Path) -> str:
    """``target`` for messages and logs: a URL's password replaced by ``***``."""
    text = str(target)
    if not is_postgres(text):
        return text
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(text)
    except psycopg.ProgrammingError:  # a malformed URL: connect reports it
        return text.split("@")[-1]
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def _connect_pg(url: str) -> Any:
    import psycopg

    from learnerd.store.pg import PgConnection

    try:
        return PgConnection(url)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise StoreUnavailable(f"cannot reach the database {redact(url)}: {reason}") from exc


@dataclass(frozen=True)
class SchemaStatus:
    """A database's record against this learnerd's migrations (:func:`status`).

    ``applied``: the declared migrations it records, ``pending``: the declared ones it lacks (in the order
    they apply), ``unknown``: the ones it records that this learnerd does not declare (sorted);
    ``numbered``: None for a record by name, 0 for no record at all, N for a numbered record of version N (not
    yet rewritten by name: see the module docstring).
    """

    applied: tuple[MigrationKey, ...]
    pending: tuple[Migration, ...]
    unknown: tuple[MigrationKey, ...]
    numbered: int | None

    @property
    def current(self) -> bool:
        """Whether the database holds exactly this learnerd's migrations."""
        return not self.pending and not self.unknown


def label(keys: Sequence[MigrationKey]) -> str:
    """``[("blocks", 4), ("fleet", 2)]`` → ``"blocks 4, fleet 2"`` (for messages)."""
    return ", ".join(f"{name} {number}" for name, number in keys)


def _record(conn: Any, where: str) -> tuple[dict[MigrationKey, float | None], int | None]:
    """The migrations the database records, each with its ``applied_at`` where known, and what kind of record
    that is: None for a record by name, 0 for none at all, N for a numbered record of version N.

    Raises:
        SchemaError: a numbered version this learnerd does not know.
    """
    postgres = getattr(conn, "dialect", "sqlite") == "postgresql"
    if postgres:
        columns = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = 'schema_migrations'"
            )
        }
        by_name = bool(columns) and "version" not in columns
    else:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        by_name = found.fetchone() is not None
    if by_name:
        rows = conn.execute("SELECT name, number, applied_at FROM schema_migrations")
        return {(name, number): applied_at for name, number, applied_at in rows}, None
    if postgres:
        versions = dict(conn.execute("SELECT version, applied_at FROM schema_migrations")) if columns else {}
    else:
        versions = dict.fromkeys(range(1, conn.execute("PRAGMA user_version").fetchone()[0] + 1))
    numbered = max(versions, default=0)
    if numbered > len(NUMBERED):
        raise SchemaError(
            f"{where}: schema version {numbered} is newer than the numbered versions this learnerd knows"
            f" (1 to {len(NUMBERED)}); upgrade learnerd"
        )
    return {key: versions.get(version) for version in range(1, numbered + 1) for key in NUMBERED[version]}, numbered


def _compare(record: dict[MigrationKey, float | None], numbered: int | None) -> SchemaStatus:
    migrations = declared()
    return SchemaStatus(
        applied=tuple(m.key for m in migrations if m.key in record),
        pending=tuple(m for m in migrations if m.key not in record),
        unknown=tuple(sorted(set(record) - {m.key for m in migrations})),
        numbered=numbered,
    )


def _status(conn: Any, where: str) -> SchemaStatus:
    return _compare(*_record(conn, where))


def _refuse_unknown(state: SchemaStatus, where: str) -> None:
    if state.unknown:
        raise SchemaError(
            f"{where}: records migrations this learnerd does not know ({label(state.unknown)}), a newer learnerd's;"
            " upgrade learnerd"
        )


def status(target: str | Path) -> SchemaStatus:
    """The record of the store at ``target`` against this learnerd's migrations (a SQLite file that does not
    exist, or an empty PostgreSQL database, lacks them all). Reads only.

    Raises:
        SchemaError: a numbered record of a version this learnerd does not know.
        StoreUnavailable, sqlite3.Error: as :func:`connect`.
    """
    if is_postgres(target):
        conn = _connect_pg(str(target))
    elif not Path(target).exists():
        return SchemaStatus((), declared(), (), 0)
    else:
        conn = _open_sqlite(target, readonly=True)
    try:
        return _status(conn, redact(target))
    finally:
        conn.close()


def connect(target: str | Path, *, readonly: bool = False) -> Any:
    """Open the store at ``target``: a SQLite file path, or a PostgreSQL URL (:func:`is_postgres`).

    SQLite: see :func:`connect_sqlite`. PostgreSQL: a :class:`learnerd.store.pg.PgConnection` whose
    record is checked (never migrated: that is :func:`migrate`'s job).

    Raises:
        SchemaError: the database records a migration this learnerd does not declare (either backend), or
            (PostgreSQL) lacks one: "run learnerd db migrate".
        StoreUnavailable: the PostgreSQL server cannot be reached.
        sqlite3.Error: the SQLite file is not a database or cannot be opened.
    """
    if not is_postgres(target):
        return connect_sqlite(target, readonly=readonly)
    conn = _connect_pg(str(target))
    try:
        where = redact(target)
        state = _status(conn, where)
        _refuse_unknown(state, where)
        if state.pending:
            raise SchemaError(
                f"{where}: lacks {len(state.pending)} of this learnerd's migrations"
                f" ({label([m.key for m in state.pending])}): run learnerd db migrate"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(target: str | Path) -> tuple[MigrationKey, ...]:
    """Apply the migrations the store at ``target`` lacks, in order; returns those applied (none when it is
    current). A numbered record is rewritten by name first (see the module docstring).

    Each migration runs in its own transaction together with its record row; on PostgreSQL every transaction
    holds the advisory lock :data:`MIGRATION_LOCK` (a second ``migrate`` waits, then finds nothing left to do).

    Raises:
        SchemaError: the database records a migration this learnerd does not declare.
        StoreUnavailable, sqlite3.Error: as :func:`connect`; a migration's own error (its transaction rolled
            back, the migrations before it applied and recorded).
    """
    conn = _connect_pg(str(target)) if is_postgres(target) else _open_sqlite(target, readonly=False)
    try:
        return _migrate(conn, redact(target))
    finally:
        conn.close()


def _migrate(conn: Any, where: str) -> tuple[MigrationKey, ...]:
    state = _status(conn, where)
    _refuse_unknown(state, where)
    if state.numbered is None and not state.pending:
        return ()  # the common case, read without taking the write lock
    postgres = getattr(conn, "dialect", "sqlite") == "postgresql"
    ddl: Callable[[str], str] = str  # SQLite reads the migrations' own type names
    if postgres:
        from learnerd.store import pg

        ddl = pg.translate_ddl
    with _migrating(conn, postgres):
        record, numbered = _record(conn, where)
        state = _compare(record, numbered)
        _refuse_unknown(state, where)
        if numbered is not None:
            _record_by_name(conn, record, postgres, ddl)
    applied = []
    for migration in state.pending:
        with _migrating(conn, postgres):
            if migration.key in _record(conn, where)[0]:
                continue  # another migrate applied it while this one waited for the lock
            for statement in _split_statements(migration.sql):
                conn.execute(ddl(statement))
            conn.execute(
                "INSERT INTO schema_migrations (name, number, applied_at) VALUES (?, ?, ?)",
                (*migration.key, time.time()),
            )
        applied.append(migration.key)
    return tuple(applied)


@contextlib.contextmanager
def _migrating(conn: Any, postgres: bool) -> Iterator[None]:
    """A migration's transaction; on PostgreSQL holding :data:`MIGRATION_LOCK` (SQLite's ``BEGIN IMMEDIATE``
    already excludes every other writer)."""
    with transaction(conn):
        if postgres:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
        yield


def _record_by_name(
    conn: Any, record: dict[MigrationKey, float | None], postgres: bool, ddl: Callable[[str], str]
) -> None:
    """Create ``schema_migrations`` by name, holding ``record`` (a numbered record's migrations, or none);
    rows without an ``applied_at`` get the present time."""
    if postgres:
        conn.execute("DROP TABLE IF EXISTS schema_migrations")  # a numbered record: ``record`` holds its rows
    conn.execute(
        ddl(
            "CREATE TABLE schema_migrations (name TEXT NOT NULL, number INTEGER NOT NULL, applied_at REAL NOT NULL,"
            " PRIMARY KEY (name, number))"
        )
    )
    now = time.time()
    conn.executemany(
        "INSERT INTO schema_migrations (name, number, applied_at) VALUES (?, ?, ?)",
        [(name, number, now if applied_at is None else applied_at) for (name, number), applied_at in record.items()],
    )
    if not postgres:
        conn.execute(f"PRAGMA user_version = {NAMED}")


def _open_sqlite(path: str | Path, *, readonly: bool) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def connect_sqlite(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the SQLite database at ``path`` and apply the migrations it lacks
    (:func:`migrate`; ``readonly``: none, the schema is read as it is).

    The connection is in autocommit mode (``isolation_level=None``); group writes with
    :func:`transaction`. Rows come back as :class:`sqlite3.Row`.

    Raises:
        SchemaError: the file records a migration this learnerd does not declare (a newer learnerd's).
        sqlite3.Error: the file is not a database or cannot be opened.
    """
    conn = _open_sqlite(path, readonly=readonly)
    try:
        if readonly:
            _refuse_unknown(_status(conn, str(path)), str(path))
        else:
            _migrate(conn, str(path))
    except BaseException:
        conn.close()
        raise
    return conn


def _split_statements(script: str) -> list[str]:
    """Split a migration script into statements (executescript would commit the open transaction)."""
    return [s.strip() for s in script.split(";") if s.strip()]


@contextlib.contextmanager
def transaction(conn: Any) -> Iterator[Any]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` if the block raises (either backend)."""
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        with conn.transaction():
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
