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
"Loading weights" tqdm bar) are turned off: they are not log lines. A JSON log holds no terminal escape
sequences (transformers prints its ``LOAD REPORT`` title in bold whatever the stream): :func:`strip_ansi`
removes them from every string value. Debug events may carry what people typed (the OpenAI endpoint logs
a request's prompt at debug): every string of a debug event passes the secret redactor first
(:func:`redact_debug_events`; the daemon's own, with its ``[privacy]`` settings, once it is built:
:func:`use_redactor`). Third-party deprecation warnings that no learnerd call causes and
learnerd cannot change (:data:`LIBRARY_WARNINGS`) are filtered out where they are raised.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import MutableMapping
from typing import Any, TextIO, TypedDict

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")


class _Settings(TypedDict):
    """The arguments of the last :func:`configure_logging`."""

    level: str
    json: bool | None
    stream: TextIO | None


_current: _Settings = {"level": "info", "json": None, "stream": None}
_redactor: list[Any] = [None]  # the Redactor of debug events; made with the default [privacy] on first use

_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")
"""ECMA-48 escape sequences: CSI (colours, bold, cursor moves), OSC (hyperlinks, titles), and the others
(``ESC`` + intermediate bytes + one final byte: ``ESC 7``, ``ESC ( B``)."""

LIBRARY_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # peft reads PreTrainedModel.is_gradient_checkpointing whenever it wraps a model in a PeftModel (every
    # adapter load: generate, eval, serving, training), and transformers 5 deprecates that property.
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning, r"transformers\.modeling_utils"),
)
"""``(message regex, category, module regex)`` of the third-party warnings :func:`adopt_library_loggers` filters."""


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
        redact_debug_events,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.typing.Processor
    if as_json:
        shared += [structlog.processors.format_exc_info, strip_ansi]
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
    _current.update({"level": level.lower(), "json": json, "stream": stream})


def set_log_level(level: str) -> str:
    """Change the minimum level, keeping the format and stream; return the previous level.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    previous = current_level()
    configure_logging(level, _current["json"], _current["stream"])
    return previous


def current_level() -> str:
    """The level set by the last :func:`configure_logging` or :func:`set_log_level`."""
    return str(_current["level"])


def use_redactor(redactor: Any) -> None:
    """Redact debug events with ``redactor`` (a :class:`~learnerd.privacy.redact.Redactor`: the daemon's, with
    its ``[privacy]`` settings) from now on."""
    _redactor[0] = redactor


def redact_debug_events(_logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: every string value of a debug event (in lists and dicts too) with its secrets
    replaced by typed placeholders (:meth:`~learnerd.privacy.redact.Redactor.redact_json`); other levels pass."""
    if method != "debug":
        return event_dict
    if _redactor[0] is None:
        from learnerd.privacy.redact import Redactor

        _redactor[0] = Redactor()
    redactor = _redactor[0]
    return {key: redactor.redact_json(value) for key, value in event_dict.items()}


def strip_ansi(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: remove terminal escape sequences (:data:`_ESCAPES`) from every string value."""
    for key, value in event_dict.items():
        if isinstance(value, str) and "\x1b" in value:
            event_dict[key] = _ESCAPES.sub("", value)
    return event_dict


def adopt_library_loggers() -> None:
    """Turn off Hugging Face's tqdm bars, filter :data:`LIBRARY_WARNINGS` and route transformers' loggers
    through ours.

    Called by :func:`configure_logging`, and again once transformers has been imported (the daemon
    does after loading the embedder): transformers gives its loggers a stderr handler of its own on
    first use, which would put plain-text lines into a JSON log.
    """
    for message, category, module in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub / transformers import
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_default_handler()
        transformers.utils.logging.enable_propagation()
