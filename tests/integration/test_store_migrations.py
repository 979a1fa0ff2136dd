"""Named migrations over both backends, SQLite and a real PostgreSQL: a store made by main at 537b866 (its
migrations recorded as version 9; tests/fixtures/store-main-537b866) upgrades in place, keeping every row, and
its record is rewritten by name once; a fresh store gets exactly that store's schema; each migration is its own
transaction; and docs/architecture.md's recipe for a table (one module, one tuple entry) holds."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import types
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg
import pytest

from learnerd.store import db, schema, suggestions
from learnerd.store.blocks import Cell, get_block
from learnerd.store.watermarks import load_watermarks
from tests.conftest import REPO_ROOT

MAIN = REPO_ROOT / "tests" / "fixtures" / "store-main-537b866"


def described(conn: Any) -> dict[str, set[tuple[Any, ...]]]:
    """Each table's columns (name, type, nullability, default, position) and indexes, by table name."""
    tables: dict[str, set[tuple[Any, ...]]] = {}
    if getattr(conn, "dialect", "sqlite") == "postgresql":
        for table, *column in conn.execute(
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = current_schema()"
        ):
            tables.setdefault(table, set()).add(("column", *column))
        for table, *index in conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        ):
            tables[table].add(("index", *index))
    else:  # the DDL as SQLite keeps it (ALTER TABLE rewrites it), whitespace aside, and its automatic indexes
        for kind, name, table, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"):
            tables.setdefault(table, set()).add((kind, name, " ".join(sql.split()) if sql else None))
    return tables


def contents(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the record of migrations."""
    return {
        table: sorted((tuple(row) for row in conn.execute(f"SELECT * FROM {table}")), key=repr)
        for table in described(conn)
        if table != "schema_migrations"
    }


def record(conn: Any) -> dict[db.MigrationKey, float]:
    return {
        (name, number): at
        for name, number, at in conn.execute("SELECT name, number, applied_at FROM schema_migrations")
    }


@pytest.fixture
def new_target(store_backend, request, tmp_path) -> Iterator[str | Any]:
    """Where a store is about to be made: a SQLite path, or an empty PostgreSQL database."""
    if store_backend == "sqlite":
        yield tmp_path / "learnerd.db"
    else:
        yield request.getfixturevalue("postgres_url")


@pytest.fixture
def main_store(store_backend, request, tmp_path) -> Iterator[str | Any]:
    """A copy of the store main at 537b866 made: the SQLite file copied, or the PostgreSQL dump restored."""
    if store_backend == "sqlite":
        target = tmp_path / "main.db"
        shutil.copyfile(MAIN / "learnerd.db", target)
        yield target
        return
    server = request.getfixturevalue("postgres_server")
    url = server.create_database()
    psql = [str(server.bindir / "psql"), "--no-psqlrc", "--quiet", "-v", "ON_ERROR_STOP=1"]
    subprocess.run([*psql, "--dbname", url, "--file", str(MAIN / "learnerd.pg.sql")], check=True, capture_output=True)
    yield url
    server.drop_database(url)


def opened(target: Any) -> Any:
    """A plain connection that migrates nothing (``db.connect`` would, on SQLite)."""
    if db.is_postgres(target):
        from learnerd.store.pg import PgConnection

        return PgConnection(target)
    return sqlite3.connect(target)


def test_a_fresh_store_has_exactly_the_schema_main_made(main_store, new_target):
    db.migrate(new_target)
    with closing(opened(main_store)) as main, closing(opened(new_target)) as new:
        made_by_main, made_now = described(main), described(new)
    assert made_by_main.keys() - {"schema_migrations"} == made_now.keys() - {"schema_migrations"}
    for table in made_now.keys() - {"schema_migrations"}:
        assert made_now[table] == made_by_main[table], table


def test_a_store_made_by_main_upgrades_in_place_keeping_every_row(main_store, new_target, store_backend):
    with closing(opened(main_store)) as main:
        rows = contents(main)
        numbered = (
            dict(main.execute("SELECT version, applied_at FROM schema_migrations"))
            if store_backend == "postgresql"
            else {}
        )
    assert rows and all(rows.values()), "the fixture holds rows in every table"
    before = db.status(main_store)
    assert before.numbered == 9 and before.current, "version 9 holds every migration there is today"

    db.connect(main_store).close()  # SQLite: opening upgrades; PostgreSQL: a replica starts before `db migrate`
    assert db.migrate(main_store) == (), "nothing to apply: the record is rewritten by name"

    db.migrate(new_target)
    with closing(opened(main_store)) as upgraded, closing(opened(new_target)) as fresh:
        assert contents(upgraded) == rows
        assert described(upgraded) == described(fresh), "the same schema as a fresh store, record included"
        by_name = record(upgraded)
    assert sorted(by_name) == sorted(m.key for m in db.declared())
    if numbered:  # PostgreSQL's record said when each version was applied: each of its migrations keeps that
        assert by_name == {key: numbered[version] for version, keys in db.NUMBERED.items() for key in keys}
    assert db.status(main_store).numbered is None

    assert db.migrate(main_store) == (), "a second open applies nothing"
    conn = db.connect(main_store)
    try:
        assert record(conn) == by_name
        assert get_block(conn, "b-ls").executed == Cell("code", "ls -lS", "bash")
        assert load_watermarks(conn, "host-a")[0].inode == 2**40 + 7
        assert suggestions.counts(conn) == {"01KDOC": {"v0001": {"served": 2, "accepted": 1, "edited": 0, "failed": 0}}}
        if store_backend == "sqlite":
            assert conn.execute("PRAGMA user_version").fetchone()[0] == db.NAMED, "learnerd of 537b866 refuses it"
    finally:
        conn.close()


def toys(*migrations: db.Migration) -> types.ModuleType:
    module = types.ModuleType("toys")
    module.MIGRATIONS = migrations
    return module


def test_each_migration_is_its_own_transaction(new_target, monkeypatch):
    broken = toys(
        db.Migration("toys", 1, "CREATE TABLE toy_a (x TEXT)"),
        db.Migration("toys", 2, "CREATE TABLE toy_b (x TEXT); CREATE TABLE toy_a (x TEXT)"),
    )
    monkeypatch.setattr(schema, "MIGRATIONS", db.collect((*schema.MODULES, broken)))
    with pytest.raises((sqlite3.OperationalError, psycopg.errors.DuplicateTable), match="toy_a"):
        db.migrate(new_target)
    state = db.status(new_target)
    assert ("toys", 1) in state.applied and [m.key for m in state.pending] == [("toys", 2)]
    with closing(opened(new_target)) as conn:
        tables = described(conn)
    assert "toy_a" in tables and "toy_b" not in tables, "toys 2 rolled back as a whole"


def recipe_module() -> types.ModuleType:
    """docs/architecture.md's recipe for a table: its code block, as a module."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text[text.index("<!-- recipe: table -->") :], re.S)
    assert code is not None, "the table recipe shows its migrations"
    module = types.ModuleType("bookmarks")
    exec(compile(code.group(1), "architecture.md", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("start", ["fresh", "made by main"])
def test_the_table_recipe_is_one_module_and_one_tuple_entry(start, new_target, main_store, monkeypatch):
    target = new_target if start == "fresh" else main_store
    db.migrate(target)
    monkeypatch.setattr(schema, "MIGRATIONS", db.collect((*schema.MODULES, recipe_module())))
    assert db.migrate(target) == (("bookmarks", 1), ("bookmarks", 2))
    conn = db.connect(target)
    try:
        conn.execute("INSERT INTO bookmarks (id, note, saved_at, url) VALUES ('b', 'docs', 1.0, 'https://x')")
        assert [tuple(r) for r in conn.execute("SELECT id, url FROM bookmarks")] == [("b", "https://x")]
    finally:
        conn.close()
    assert db.migrate(target) == ()
