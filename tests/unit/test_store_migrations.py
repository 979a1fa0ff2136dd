"""Migrations are named per module and cannot collide: a name two modules claim, a migration declared twice
or a number out of order is refused when the tuple of modules is collected (``learnerd.store.schema`` does
so at import); the numbered versions of older databases map onto the named migrations."""

from __future__ import annotations

import re
import types

import pytest

from learnerd.store import db, schema


def module(name: str, *keys: db.MigrationKey) -> types.ModuleType:
    """A store module declaring migrations ``keys`` (each creating a table of its own)."""
    mod = types.ModuleType(name)
    mod.MIGRATIONS = tuple(db.Migration(n, k, f"CREATE TABLE {n}_{k} (x TEXT)") for n, k in keys)
    return mod


def test_two_modules_naming_the_same_migration_are_refused():
    first, second = module("shelf", ("shelf", 1)), module("bookcase", ("shelf", 1))
    with pytest.raises(db.MigrationConflict, match=r"\('shelf', 1\) of bookcase: the name 'shelf' is shelf's"):
        db.collect((first, second))


def test_a_new_module_taking_a_name_of_the_store_is_refused():
    """Two branches merged: one adds ("suggestions", 2) to a new module instead of learnerd.store.suggestions."""
    stray = module("learnerd.store.ratings", ("suggestions", 2))
    with pytest.raises(db.MigrationConflict, match=re.escape("the name 'suggestions' is learnerd.store.suggestions's")):
        db.collect((*schema.MODULES, stray))


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ((("shelf", 1), ("shelf", 1)), r"\('shelf', 1\) comes after \('shelf', 1\)"),
        ((("shelf", 1), ("shelf", 3)), r"\('shelf', 3\) comes after \('shelf', 1\)"),
        ((("shelf", 2),), r"\('shelf', 2\) comes after \('shelf', 0\)"),
        ((("shelf", 2), ("shelf", 1)), r"\('shelf', 2\) comes after \('shelf', 0\)"),
    ],
)
def test_a_module_numbers_its_migrations_1_2_and_so_on_each_once(keys, message):
    with pytest.raises(db.MigrationConflict, match=message):
        db.collect((module("shelf", *keys),))


def test_the_store_checks_its_own_modules_at_import():
    assert db.collect(schema.MODULES) == schema.MIGRATIONS and db.declared() is schema.MIGRATIONS


def test_the_numbered_versions_map_onto_declared_migrations_once_each_in_order():
    keys = [key for version in sorted(db.NUMBERED) for key in db.NUMBERED[version]]
    assert sorted(db.NUMBERED) == list(range(1, len(db.NUMBERED) + 1)) and max(db.NUMBERED) < db.NAMED
    assert len(set(keys)) == len(keys), "each named migration in one version"
    assert set(keys) <= {m.key for m in db.declared()}
    for name in {name for name, _ in keys}:  # a version never holds a migration before an earlier one of its name
        assert [number for n, number in keys if n == name] == list(range(1, 1 + sum(n == name for n, _ in keys)))
