"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from learnerd.config import Config, ConfigError, load_config
from learnerd.daemon.logging import LEVELS, configure_logging, json_choice


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
        default=os.environ.get("LEARNERD_CONFIG"),
        help="TOML config file (default: $LEARNERD_CONFIG, else built-in defaults)",
    )
    parser.add_argument("--state-dir", metavar="DIR", help="state directory (overrides the config file)")
    parser.add_argument(
        "--store-url",
        metavar="URL",
        default=os.environ.get("LEARNERD_STORE_URL"),
        help="a SQLite path or postgresql:// URL (default: $LEARNERD_STORE_URL, else [store] url)",
    )
    parser.add_argument(
        "--log-level", choices=LEVELS, default=None, help="minimum log level (default: [logging] level, else info)"
    )


def read_config(args: argparse.Namespace) -> Config:
    """The config named by ``--config`` with ``--state-dir`` (and ``--log-dir`` / ``--docs-dir`` where the
    command has them) applied. No side effects: a reload calls it again.

    Raises:
        ConfigError: the config file is missing or invalid.
    """
    cfg = load_config(args.config)
    if args.state_dir:
        cfg.state_dir = Path(args.state_dir).expanduser().resolve()
    if getattr(args, "store_url", None):
        url = args.store_url
        cfg.store.url = (
            url if url.startswith(("postgresql://", "postgres://")) else str(Path(url).expanduser().resolve())
        )
    cfg.log_dirs = [*cfg.log_dirs, *(Path(d).expanduser().resolve() for d in getattr(args, "log_dir", []))]
    cfg.docs_dirs = [*cfg.docs_dirs, *(Path(d).expanduser().resolve() for d in getattr(args, "docs_dir", []))]
    return cfg


def add_dir_options(parser: argparse.ArgumentParser) -> None:
    """``--log-dir`` / ``--docs-dir`` (repeatable): directories added to the config's ``log_dirs`` / ``docs_dirs``."""
    parser.add_argument("--log-dir", action="append", default=[], metavar="DIR", help="a log directory (repeatable)")
    parser.add_argument("--docs-dir", action="append", default=[], metavar="DIR", help="a .dlm directory (repeatable)")


def load_config_from_args(args: argparse.Namespace) -> Config:
    """:func:`read_config`, with logging configured: ``--log-level``, else ``[logging] level``, else info.

    Raises:
        CommandError: the config file is missing or invalid.
    """
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


def parse_since(text: str, now: float) -> float:
    """A point in time as epoch seconds, from ISO 8601 (``2024-05-01``, ``2024-05-01T12:00:00Z``; a
    naive time is UTC) or from a duration back from ``now`` (``90s``, ``30m``, ``6h``, ``2d``, ``1w``).

    Raises:
        CommandError: neither form (exit status 2).
    """
    import datetime as dt
    import re

    text = text.strip()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text):
        return now - float(m[1]) * _UNITS[m[2]]
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise CommandError(
            f"--since {text!r}: use ISO 8601 (2024-05-01T12:00:00Z) or a duration (90s, 30m, 6h, 2d, 1w)",
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
        return db.connect(cfg.store_target, readonly=readonly)
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
