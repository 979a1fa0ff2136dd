"""``[store]``: where the tables and the adapters live (docs/fleet.md); ``[suggestions]``: what is kept of
the answers learnerd served (:mod:`learnerd.store.suggestions`)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from learnerd.sections import Section, relative_to_the_file


class StoreConfig(Section):
    """Where the tables live (docs/fleet.md).

    ``url`` is a SQLite path or a ``postgresql://`` URL; paths are relative to the config file.
    """

    url: str = ""
    """"" = <state_dir>/learnerd.db (SQLite); a SQLite path; or postgresql://…"""
    adapters_dir: str = ""
    """"" = <state_dir>/adapters; a fleet shares one path (a shared file system)"""

    @field_validator("url", "adapters_dir")
    @classmethod
    def _paths_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith("postgres") and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"store.url: a PostgreSQL URL starts with postgresql://, not {value.split(':')[0]}:")
        if value.startswith(("postgresql://", "postgres://")):
            return value
        return relative_to_the_file(value, info)


class SuggestionsConfig(Section):
    """How long served answers are remembered, and how an execution joins the answer it ran.

    See docs/operations.md, "Suggestions", and :mod:`learnerd.store.suggestions`.
    """

    retention_days: float = Field(30.0, gt=0, le=36500)
    """suggestions served longer ago than this (days) are removed, with their served blocks that never ran"""
    join_window_s: float = Field(3600.0, gt=0)
    """an execution answers a suggestion served at most this many seconds before it"""
    prune_interval_s: float = Field(3600.0, gt=0)
    """how often expired suggestions are removed (seconds; also once at start-up)"""
