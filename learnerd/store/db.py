"""The database: SQLite (a file, the default) or PostgreSQL (a ``postgresql://`` URL, for a fleet of
replicas; see docs/fleet.md and :mod:`learnerd.store.pg`): connection settings, schema version and
migrations.

One file, WAL mode, ``synchronous=NORMAL``: a committed transaction survives a process crash
(``kill -9``); after a power loss the newest transactions may roll back, but always as a whole, and
since the analyzer commits each batch of blocks together with the watermark that covers them, a
rollback only means those log lines are read again.

One schema for both backends: :data:`MIGRATIONS` holds one SQL script per version, written in the
SQL both engines accept (PostgreSQL gets its column type names through
:func:`learnerd.store.pg.translate_ddl`). On SQLite the version lives in ``PRAGMA user_version`` and
:func:`connect` applies the missing migrations itself, each in its own transaction (one process owns
the file). On PostgreSQL the version is the largest row of ``schema_migrations`` (version, applied_at),
and only :func:`migrate` (``learnerd db migrate``) applies migrations: each in its own transaction
(PostgreSQL's DDL is transactional) under an advisory lock, so replicas started together cannot race;
:func:`connect` refuses a schema older than the code.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MIGRATIONS: tuple[str, ...] = (
    # 1: blocks, examples, embeddings, watermarks, partial foyle traces.
    """
    CREATE TABLE blocks (
        id                 TEXT PRIMARY KEY,
        source             TEXT NOT NULL,
        context            TEXT NOT NULL DEFAULT '[]',
        context_time       REAL,
        generated          TEXT,
        generated_language TEXT,
        generated_time     REAL,
        executed           TEXT,
        executed_language  TEXT,
        exit_code          INTEGER,
        eval_mode          INTEGER NOT NULL DEFAULT 0,
        executed_time      REAL,
        suggestion_status  TEXT,
        event_time         REAL,
        created_at         REAL NOT NULL,
        updated_at         REAL NOT NULL
    );
    CREATE INDEX blocks_updated_at ON blocks(updated_at);
    CREATE TABLE examples (
        id         TEXT PRIMARY KEY,
        query      TEXT NOT NULL,
        answer     TEXT NOT NULL,
        language   TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL
    );
    CREATE TABLE embeddings (
        example_id TEXT PRIMARY KEY,
        model      TEXT NOT NULL,
        dim        INTEGER NOT NULL,
        text_hash  TEXT NOT NULL,
        vector     BLOB NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE watermarks (
        path       TEXT PRIMARY KEY,
        inode      INTEGER NOT NULL,
        "offset"   INTEGER NOT NULL,
        line       INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE foyle_traces (
        trace_id   TEXT PRIMARY KEY,
        kind       TEXT NOT NULL,
        request    TEXT,
        response   TEXT,
        eval_mode  INTEGER NOT NULL DEFAULT 0,
        first_time REAL,
        updated_at REAL NOT NULL
    );
    """,
    # 2: a watermark also remembers a fingerprint of the file's first bytes (sha256 hex of the first
    # fingerprint_len bytes), so a file replaced by another that reuses its inode is not resumed mid-way.
    """
    ALTER TABLE watermarks ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
    ALTER TABLE watermarks ADD COLUMN fingerprint_len INTEGER NOT NULL DEFAULT 0
    """,
    # 3: the generated cell keeps its kind (foyle generates markup blocks as well as code blocks).
    """
    ALTER TABLE blocks ADD COLUMN generated_kind TEXT NOT NULL DEFAULT 'code'
    """,
    # 4: a fleet of replicas on one database (docs/fleet.md). Watermarks are keyed by (replica host, path),
    # so two hosts can tail files with the same path; replicas hold heartbeat leases; reconcile_log audits
    # which replica reconciled which key when ([fleet] audit); adapter_commits records each committed
    # adapter version of the shared adapters_dir.
    """
    CREATE TABLE watermarks_v4 (
        host            TEXT NOT NULL DEFAULT '',
        path            TEXT NOT NULL,
        inode           INTEGER NOT NULL,
        "offset"        INTEGER NOT NULL,
        line            INTEGER NOT NULL,
        updated_at      REAL NOT NULL,
        fingerprint     TEXT NOT NULL DEFAULT '',
        fingerprint_len INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (host, path)
    );
    INSERT INTO watermarks_v4 (host, path, inode, "offset", line, updated_at, fingerprint, fingerprint_len)
        SELECT '', path, inode, "offset", line, updated_at, fingerprint, fingerprint_len FROM watermarks;
    DROP TABLE watermarks;
    ALTER TABLE watermarks_v4 RENAME TO watermarks;
    CREATE TABLE replicas (
        id      TEXT PRIMARY KEY,
        host    TEXT NOT NULL,
        pid     INTEGER NOT NULL,
        started REAL NOT NULL,
        renewed REAL NOT NULL,
        roles   TEXT NOT NULL
    );
    CREATE TABLE reconcile_log (
        queue    TEXT NOT NULL,
        key      TEXT NOT NULL,
        replica  TEXT NOT NULL,
        started  REAL NOT NULL,
        finished REAL NOT NULL
    );
    CREATE INDEX reconcile_log_key ON reconcile_log(queue, key);
    CREATE TABLE adapter_commits (
        document     TEXT NOT NULL,
        version      INTEGER NOT NULL,
        replica      TEXT NOT NULL,
        committed_at REAL NOT NULL,
        PRIMARY KEY (document, version)
    )
    """,
    # 5: assistants' sessions (Claude Code, Codex CLI, OpenTelemetry GenAI): what each session's person asked
    # last (the intent of the commands that follow), the assistant's plan, the session's working directory and
    # the failed commands not yet followed by a success; and each learned block's rejected attempts (the failed
    # commands a succeeded one corrected). learnerd.store.assistant_sessions.
    """
    CREATE TABLE assistant_sessions (
        source      TEXT NOT NULL,
        session_key TEXT NOT NULL,
        session_id  TEXT NOT NULL DEFAULT '',
        intent      TEXT NOT NULL DEFAULT '',
        plan        TEXT NOT NULL DEFAULT '',
        intent_time REAL,
        cwd         TEXT NOT NULL DEFAULT '',
        failed      TEXT NOT NULL DEFAULT '[]',
        updated_at  REAL NOT NULL,
        PRIMARY KEY (source, session_key)
    );
    CREATE INDEX assistant_sessions_cwd ON assistant_sessions(cwd, intent_time);
    CREATE TABLE rejected_attempts (
        block_id   TEXT NOT NULL,
        attempt_id TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (block_id, attempt_id)
    )
    """,
    # 6: tombstones of what ``learnerd forget`` took back (learnerd.store.tombstones): the examples reconciler
    # refuses every block a tombstone covers, so re-ingestion, backfill and fleet peers never learn it again.
    """
    CREATE TABLE tombstones (
        id         TEXT PRIMARY KEY,
        kind       TEXT NOT NULL,
        value      TEXT NOT NULL,
        block_ids  TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL
    )
    """,
    # 7: learnerd remembers what it served (learnerd.store.suggestions): a block may carry the session id of
    # the program that logged it; each served answer is a suggestion (its block, the adapter version that
    # answered, the normalized command) until an execution resolves it; suggestion_counts keeps the totals per
    # (document, version, outcome), so pruning old suggestions never lowers them.
    """
    ALTER TABLE blocks ADD COLUMN session TEXT;
    CREATE TABLE suggestions (
        block_id    TEXT PRIMARY KEY,
        document    TEXT NOT NULL,
        version     TEXT NOT NULL,
        session     TEXT,
        command     TEXT NOT NULL,
        answer      TEXT NOT NULL,
        retrieved   TEXT NOT NULL DEFAULT '[]',
        served_at   REAL NOT NULL,
        outcome     TEXT,
        resolved_by TEXT,
        resolved_at REAL
    );
    CREATE INDEX suggestions_session ON suggestions(session, served_at);
    CREATE INDEX suggestions_command ON suggestions(command, served_at);
    CREATE INDEX suggestions_served_at ON suggestions(served_at);
    CREATE INDEX suggestions_resolved_by ON suggestions(resolved_by);
    CREATE TABLE suggestion_counts (
        document TEXT NOT NULL,
        version  TEXT NOT NULL,
        outcome  TEXT NOT NULL,
        n        INTEGER NOT NULL,
        PRIMARY KEY (document, version, outcome)
    )
    """,
    # 8: provenance: where a block's executed cell was read (the log file and its 1-based line number), so an
    # adapter version's manifest.json and `learnerd why` can name the line an example came from. NULL for
    # blocks ingested before this version (and for cells not read from a file).
    """
    ALTER TABLE blocks ADD COLUMN executed_path TEXT;
    ALTER TABLE blocks ADD COLUMN executed_line INTEGER
    """,
    # 9: an adapter version is committed as a candidate and promoted by the promotion gate
    # (docs/evaluation.md); a row's promoted_at marks it promoted, the newest promoted row is current. Rows
    # committed before were current when committed: they count as promoted.
    """
    ALTER TABLE adapter_commits ADD COLUMN promoted_at REAL;
    UPDATE adapter_commits SET promoted_at = committed_at
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaError(RuntimeError):
    """The database's schema is not this learnerd's: written by a newer one, or (PostgreSQL) older
    than the code and not yet migrated."""


class StoreUnavailable(RuntimeError):
    """The PostgreSQL server cannot be reached (or refused the connection)."""


def is_postgres(target: str | Path) -> bool:
    """True when ``target`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``), not a SQLite path."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def connect(target: str | Path, *, readonly: bool = False) -> Any:
    """Open the store at ``target``: a SQLite file path, or a PostgreSQL URL (:func:`is_postgres`).

    SQLite: see :func:`connect_sqlite`. PostgreSQL: a :class:`learnerd.store.pg.PgConnection` whose
    schema is checked (never migrated: that is :func:`migrate`'s job).

    Raises:
        SchemaError: the schema is newer than :data:`SCHEMA_VERSION` (either backend), or older
            (PostgreSQL: "run learnerd db migrate").
        StoreUnavailable: the PostgreSQL server cannot be reached.
        sqlite3.Error: the SQLite file is not a database or cannot be opened.
    """
    if not is_postgres(target):
        return connect_sqlite(target, readonly=readonly)
    conn = _connect_pg(str(target))
    try:
        version = _pg_version(conn)
        if version != SCHEMA_VERSION:
            raise SchemaError(_version_message(str(target), version))
    except BaseException:
        conn.close()
        raise
    return conn


def _version_message(target: str, version: int) -> str:
    where = redact(target)
    if version > SCHEMA_VERSION:
        return f"{where}: schema version {version} is newer than this learnerd's ({SCHEMA_VERSION}); upgrade learnerd"
    return (
        f"{where}: schema version {version} is older than this learnerd's ({SCHEMA_VERSION}): run learnerd db migrate"
    )


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
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


def _connect_pg(url: str) -> Any:
    import psycopg

    from learnerd.store.pg import PgConnection

    try:
        return PgConnection(url)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise StoreUnavailable(f"cannot reach the database {redact(url)}: {reason}") from exc


def _pg_version(conn: Any) -> int:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    if not exists:
        return 0
    return conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]


#: The advisory lock key :func:`migrate` holds while it migrates (any constant; "lrnd" in ASCII).
MIGRATION_LOCK = 0x6C726E64


def schema_version(target: str | Path) -> int:
    """The schema version of the store at ``target`` (0 for an empty PostgreSQL database or SQLite file).

    Raises:
        StoreUnavailable, sqlite3.Error: as :func:`connect`.
    """
    if is_postgres(target):
        conn = _connect_pg(str(target))
        try:
            return _pg_version(conn)
        finally:
            conn.close()
    if not Path(target).exists():
        return 0
    conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def migrate(target: str | Path) -> tuple[int, int]:
    """Bring the store at ``target`` up to :data:`SCHEMA_VERSION`; returns (version before, after).

    PostgreSQL: every missing migration in its own transaction, holding the advisory lock
    :data:`MIGRATION_LOCK` (a second ``migrate`` waits, then finds nothing left to do).

    Raises:
        SchemaError: the schema is newer than this learnerd's.
        StoreUnavailable, sqlite3.Error: as :func:`connect`.
    """
    if not is_postgres(target):
        before = schema_version(target)
        connect_sqlite(target).close()
        return before, SCHEMA_VERSION
    from learnerd.store.pg import translate_ddl

    conn = _connect_pg(str(target))
    try:
        before = _pg_version(conn)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
        version = _pg_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaError(_version_message(str(target), version))
        for target_version in range(version + 1, SCHEMA_VERSION + 1):
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
                if _pg_version(conn) >= target_version:
                    continue  # another migrate applied it while we waited for the lock
                for statement in _split_statements(MIGRATIONS[target_version - 1]):
                    conn.execute(translate_ddl(statement))
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", (target_version, time.time())
                )
        return before, _pg_version(conn)
    finally:
        conn.close()


def connect_sqlite(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the SQLite database at ``path`` and bring its schema up to date.

    The connection is in autocommit mode (``isolation_level=None``); group writes with
    :func:`transaction`. Rows come back as :class:`sqlite3.Row`.

    Raises:
        SchemaError: the file's schema version is newer than :data:`SCHEMA_VERSION`.
        sqlite3.Error: the file is not a database or cannot be opened.
    """
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
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        conn.close()
        raise SchemaError(
            f"{path}: schema version {version} is newer than this learnerd's ({SCHEMA_VERSION}); upgrade learnerd"
        )
    if readonly:
        return conn
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with transaction(conn):
            for statement in _split_statements(MIGRATIONS[target - 1]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {target}")
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
