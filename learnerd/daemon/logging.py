"""structlog set-up: JSON lines when stderr is not a terminal, readable console output when it is.

Every module logs with ``structlog.get_logger(__name__)`` and binds its context (``controller``,
``key``, ``reconcile_id``, ``file``, ``line`` …) as key-value pairs; :func:`configure_logging` may be
called again at any time (``learnerd ctl log-level``, SIGHUP reload) and takes effect at once.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")


def parse_level(name: str) -> int:
    """``"info"`` → ``logging.INFO``. Raises ValueError for a name not in :data:`LEVELS`."""
    lowered = name.lower()
    if lowered not in LEVELS:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(LEVELS)}")
    return logging.getLevelNamesMapping()[lowered.upper()]


def configure_logging(level: str = "info", json: bool | None = None, stream: TextIO | None = None) -> None:
    """(Re)configure structlog.

    Args:
        level: minimum level, one of :data:`LEVELS`.
        json: force JSON lines (True) or console output (False); None picks by ``stream.isatty()``.
        stream: where log lines go; stderr by default.
    """
    out = stream or sys.stderr
    if json is None:
        json = not out.isatty()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(parse_level(level)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # Libraries that use the standard logging module (transformers, aiohttp) follow the same threshold.
    logging.basicConfig(stream=out, level=max(parse_level(level), logging.WARNING), force=True)
