"""Options and helpers shared by the subcommands.

Building the parser imports no settings: the config (:mod:`learnerd.daemon.config`, every subsystem's
``settings.py``) is imported when a command reads it, so ``learnerd --help`` stays light
(tests/unit/test_cmd_imports.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from learnerd.daemon.logging import LEVELS, configure_logging, json_choice

if TYPE_CHECKING:
    from learnerd.daemon.config import Config


class CommandError(Exception):
    """A failure the user can act on: printed as one line, no traceback; ``exit_code`` is the status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--state-dir`` and ``--log-level``, accepted after any subcommand."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="TOML config file (default: $LEARNERD_CONFIG, else $XDG_CONFIG_HOME/learnerd/config.toml, else "
        "/etc/learnerd/config.toml, else built-in defaults)",
    )
    parser.add_argument("--state-dir", metavar="DIR", help="state directory (overrides the config file)")
    parser.add_argument(
        "--store-url",
        metavar="URL",
        default=None,
        help="a SQLite path or postgresql:// URL (default: $LEARNERD_STORE_URL, else [store] url)",
    )
    parser.add_argument(
        "--log-level", choices=LEVELS, default=None, help="minimum log level (default: [logging] level, else info)"
    )


def read_config(args: argparse.Namespace) -> Config:
    """The config :func:`~learnerd.daemon.config.find_config` finds (``--config`` first) with ``--state-dir`` (and
    ``--log-dir`` / ``--docs-dir`` where the command has them) applied. No side effects: a reload calls it
    again, on the file the first call found.

    Raises:
        ConfigError: the config file is missing or invalid, or a directory setting names a file.
    """
    from learnerd.daemon.config import Environment, check_directories, find_config, load_config

    if args.config is None:
        found = find_config()
        args.config = str(found) if found is not None else None
    cfg = load_config(args.config)
    if args.state_dir:
        cfg.state_dir = Path(os.path.abspath(Path(args.state_dir).expanduser()))  # a symlink stays refusable
    url = getattr(args, "store_url", None) or Environment().store_url
    if url:
        cfg.store.url = (
            url if url.startswith(("postgresql://", "postgres://")) else str(Path(url).expanduser().resolve())
        )
    cfg.log_dirs = [*cfg.log_dirs, *(Path(d).expanduser().resolve() for d in getattr(args, "log_dir", []))]
    cfg.docs_dirs = [*cfg.docs_dirs, *(Path(d).expanduser().resolve() for d in getattr(args, "docs_dir", []))]
    check_directories(cfg)
    return cfg


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """``--wait SECONDS`` (float, default 120): how long a command that asks a running daemon waits for one that
    is still starting."""
    parser.add_argument(
        "--wait",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for a daemon that is still starting (default: 120)",
    )


@contextlib.contextmanager
def document_store_errors(doc: Path) -> Iterator[None]:
    """Turn what reading the document ``doc`` and its adapter store can raise into a one-line
    :class:`CommandError`: the document's own error (it names its line), an adapter store error or an ``OSError``
    prefixed with ``doc``, an unreachable or unmigrated store database as it is."""
    from learnerd.store import db
    from learnerd.store.adapters import AdapterStoreError
    from learnerd.store.dlm import DocumentError

    try:
        yield
    except DocumentError as exc:
        raise CommandError(str(exc)) from None
    except AdapterStoreError as exc:
        raise CommandError(f"{doc}: {exc}") from None
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"{doc}: {exc.strerror or exc}") from None


def add_dir_options(parser: argparse.ArgumentParser) -> None:
    """``--log-dir`` / ``--docs-dir`` (repeatable): directories added to the config's ``log_dirs`` / ``docs_dirs``."""
    parser.add_argument("--log-dir", action="append", default=[], metavar="DIR", help="a log directory (repeatable)")
    parser.add_argument("--docs-dir", action="append", default=[], metavar="DIR", help="a .dlm directory (repeatable)")


def load_config_from_args(args: argparse.Namespace) -> Config:
    """:func:`read_config`, with logging configured: ``--log-level``, else ``[logging] level``, else info.

    Raises:
        CommandError: the config file is missing or invalid.
    """
    from learnerd.sections import ConfigError

    try:
        cfg = read_config(args)
    except ConfigError as exc:
        configure_logging(args.log_level or "info")
        raise CommandError(str(exc)) from exc
    apply_logging(args, cfg)
    return cfg


def apply_logging(args: argparse.Namespace, cfg: Config) -> None:
    """(Re)configure logging: ``--log-level``, else ``[logging] level``, else info; ``[logging] format``."""
    configure_logging(args.log_level or cfg.logging.level or "info", json_choice(cfg.logging.format))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])\s*")
_SPHINX_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def plain(doc: str | None) -> str:
    """The first paragraph of a module docstring as plain text for ``--help``: Sphinx roles
    (``:mod:`x.y```, ``:func:`~x.y```) become the name, reST literals lose their backquotes."""
    first = (doc or "").strip().split("\n\n")[0]
    first = _SPHINX_ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], first)
    return " ".join(first.replace("``", "").split())


def parse_since(text: str, now: float) -> float:
    """A point in time as epoch seconds, from ISO 8601 (``2024-05-01``, ``2024-05-01T12:00:00Z``; a
    naive time is UTC) or from a duration back from ``now``: one or more parts of a number and a unit,
    ``s`` / ``m`` / ``h`` / ``d`` / ``w`` (``90s``, ``6h``, ``2h30m``, ``1d 12h``, ``1.5h``).

    Raises:
        CommandError: neither form (exit status 2).
    """
    import datetime as dt

    text = text.strip()
    if text and _DURATION_PART.sub("", text) == "" and text[0].isdigit():
        return now - sum(float(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(text))
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise CommandError(
            f"--since {text!r}: use ISO 8601 (2024-05-01T12:00:00Z) or a duration (90s, 30m, 6h, 2h30m, 2d, 1w)",
            exit_code=2,
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def open_store(cfg: Config, *, readonly: bool = False):
    """:func:`learnerd.store.db.connect` on ``cfg``'s store, its errors turned into one-line messages.

    Raises:
        CommandError: the database is unreachable, or its schema is not this learnerd's (exit 1).
    """
    from learnerd.store import db

    try:
        return db.connect(cfg.layout.store_target, readonly=readonly)
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from exc


def open_daemon(cfg: Config, **kwargs):
    """``Daemon(cfg, **kwargs)``, an unreachable store or a schema mismatch turned into a one-line error.

    Raises:
        CommandError: as :func:`open_store` (exit 1).
    """
    from learnerd.daemon.app import Daemon
    from learnerd.store import db

    try:
        return Daemon(cfg, **kwargs)
    except (db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from exc
