"""The store's tables: the modules that own them, in the order their migrations apply
(:mod:`learnerd.store.db` applies and records them).

Each module declares its tables' DDL as its ``MIGRATIONS`` (:class:`~learnerd.store.db.Migration`); a new
table is a module of its own plus one entry in :data:`MODULES` (docs/architecture.md, "A table"). A module's
migrations apply after those of the modules before it.
"""

from __future__ import annotations

from learnerd.store import (
    assistant_sessions,
    blocks,
    embeddings,
    examples,
    fleet_tables,
    foyle_traces,
    suggestions,
    tombstones,
    watermarks,
)
from learnerd.store.db import collect

MODULES = (
    blocks,
    examples,
    embeddings,
    watermarks,
    foyle_traces,
    fleet_tables,
    assistant_sessions,
    tombstones,
    suggestions,
)

MIGRATIONS = collect(MODULES)
"""Every module's migrations in order, checked here, at import: a name two modules claim, or a module's
numbers not running 1, 2, … raises :class:`~learnerd.store.db.MigrationConflict`."""
