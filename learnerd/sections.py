"""The ground floor of the settings: the base of every config section, :class:`ConfigError`, path resolution and
the config directory.

Each subsystem declares its own sections in a ``settings.py`` beside its code (``store/``, ``ml/``,
``training/``, ``analyzer/``, ``fleet/``, ``eval/``, ``steering/``, ``reconcilers/``, ``api/``); the daemon's config
module (:mod:`learnerd.daemon.config`) composes them into the file's layout, loads TOML and generates the commented
reference from the fields' own docstrings. A setting is declared once: its field, its range, its docstring.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationInfo

CONFIG_ENV = "LEARNERD_CONFIG"
"""The environment variable naming the config file (``--config`` wins)."""


def default_config_dir(xdg_config_home: str | None = None) -> Path:
    """``$XDG_CONFIG_HOME/learnerd`` (``~/.config/learnerd`` when unset or empty): where ``learnerd init`` writes
    and ``learnerd`` looks for ``config.toml`` and the ``token`` file. ``xdg_config_home`` None reads the
    environment."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "") if xdg_config_home is None else xdg_config_home
    return Path(xdg or os.path.join(os.path.expanduser("~"), ".config")) / "learnerd"


class ConfigError(ValueError):
    """Raised for an unreadable config file, an unknown key or a value of the wrong type or range."""


class Section(BaseModel):
    """A config table: unknown keys refused, no type coercion (TOML's int may stand for a float), no nan/inf.

    The docstring under each field is its description in the generated reference (pydantic's
    ``use_attribute_docstrings``); the first line of a section's own docstring heads its table there.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


def resolve_path(raw: str, base: Path, *, follow_symlinks: bool = True) -> Path:
    """``raw`` with ``~`` and ``$VARS`` expanded, made absolute against ``base`` (the config file's directory);
    with ``follow_symlinks`` False only ``.`` and ``..`` are folded, so a symlink named in the path stays
    visible to whoever must refuse it (the state directory)."""
    p = Path(os.path.expandvars(os.path.expanduser(raw)))
    if p.is_absolute():
        return p
    return (base / p).resolve() if follow_symlinks else Path(os.path.abspath(base / p))


def relative_to_the_file(value: str, info: ValidationInfo) -> str:
    """A field validator's body for a path setting: ``value`` resolved against the config file's directory
    (the validation context's ``base``); unchanged when empty or when there is no file."""
    base = (info.context or {}).get("base")
    return str(resolve_path(value, base)) if value and base is not None else value
