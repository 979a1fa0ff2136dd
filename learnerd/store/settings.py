"""``[store]``: where the tables and the adapters live (docs/fleet.md)."""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator

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
