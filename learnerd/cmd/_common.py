"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from learnerd.config import Config, ConfigError, load_config
from learnerd.daemon.logging import LEVELS, configure_logging


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
    parser.add_argument("--log-level", choices=LEVELS, default="info", help="minimum log level (default: info)")


def load_config_from_args(args: argparse.Namespace) -> Config:
    """The config named by ``--config`` with ``--state-dir`` applied; logging configured to ``--log-level``.

    Raises:
        CommandError: the config file is missing or invalid.
    """
    configure_logging(args.log_level)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise CommandError(str(exc)) from exc
    if args.state_dir:
        cfg.state_dir = Path(args.state_dir).expanduser().resolve()
    return cfg
