"""structlog set-up: JSON lines when stderr is not a terminal, readable console output when it is.

Every module logs with ``structlog.get_logger(__name__)`` and binds its context (``controller``,
``key``, ``reconcile_id``, ``file``, ``line`` …) as key-value pairs; :func:`configure_logging` may be
called again at any time and takes effect at once; :func:`set_log_level` changes only the level
(``learnerd ctl log-level``, a SIGHUP reload).

One stream, one format: records of libraries that use the standard :mod:`logging` module
(transformers, sentence-transformers, aiohttp) and Python warnings go through the same renderer,
at ``warning`` or above, so a JSON log stays one JSON object per line. Exceptions render as a
``exception`` string holding the whole traceback in JSON, and as a traceback without local
variables on a terminal (locals could hold tokens). Hugging Face progress bars (transformers'
"Loading weights" tqdm bar) are turned off: they are not log lines.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")

_current: dict[str, object] = {"level": "info", "json": None, "stream": None}


def parse_level(name: str) -> int:
    """``"info"`` → ``logging.INFO``. Raises ValueError for a name not in :data:`LEVELS`."""
    lowered = name.lower()
    if lowered not in LEVELS:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(LEVELS)}")
    return logging.getLevelNamesMapping()[lowered.upper()]


def json_choice(fmt: str) -> bool | None:
    """A ``[logging] format`` value (auto, json, console) → the ``json`` argument of :func:`configure_logging`."""
    return {"json": True, "console": False}.get(fmt)


def configure_logging(level: str = "info", json: bool | None = None, stream: TextIO | None = None) -> None:
    """(Re)configure structlog and the standard logging module.

    Args:
        level: minimum level, one of :data:`LEVELS`.
        json: force JSON lines (True) or console output (False); None picks by ``stream.isatty()``.
        stream: where log lines go; stderr by default.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    threshold = parse_level(level)
    out = stream or sys.stderr
    as_json = (not out.isatty()) if json is None else json
    shared: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.typing.Processor
    if as_json:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        colors = out.isatty()
        renderer = structlog.dev.ConsoleRenderer(
            colors=colors,
            exception_formatter=structlog.dev.RichTracebackFormatter(
                show_locals=False, color_system="truecolor" if colors else None
            ),
        )
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Libraries follow the same threshold, but never below warning: their info lines are noise here.
    root.setLevel(max(threshold, logging.WARNING))
    logging.captureWarnings(True)
    adopt_library_loggers()
    _current.update(level=level.lower(), json=json, stream=stream)


def set_log_level(level: str) -> str:
    """Change the minimum level, keeping the format and stream; return the previous level.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    previous = current_level()
    configure_logging(level, _current["json"], _current["stream"])  # type: ignore[arg-type]
    return previous


def current_level() -> str:
    """The level set by the last :func:`configure_logging` or :func:`set_log_level`."""
    return str(_current["level"])


def adopt_library_loggers() -> None:
    """Turn off Hugging Face's tqdm bars and route transformers' loggers through ours.

    Called by :func:`configure_logging`, and again once transformers has been imported (the daemon
    does after loading the embedder): transformers gives its loggers a stderr handler of its own on
    first use, which would put plain-text lines into a JSON log.
    """
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub / transformers import
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_default_handler()
        transformers.utils.logging.enable_propagation()
