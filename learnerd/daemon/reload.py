"""Applying a re-read config file to a running daemon (``learnerd ctl reload``, SIGHUP).

What changes without a restart:

* ``[logging] level`` and ``format`` — when the file sets a level, that level becomes current (also
  after a ``ctl log-level``); an unset level leaves the current one alone;
* ``[workqueue]`` — every queue's rate limiter (per-key failure counts and the bucket's tokens carry
  over, see :class:`~learnerd.runtime.workqueue.ControllerRateLimiter`);
* ``[controllers.NAME] timeout_s`` and ``max_retries`` — from the next reconcile on;
* ``[shutdown] drain_timeout_s`` — the next drain uses it.

Everything else (``state_dir``, ``log_dirs``, ``docs_dirs``, ``[analyzer]``, ``[examples]``,
``[embeddings]``, ``[probes]``, ``[admin]``, ``[store]``, ``[fleet]``, a controller's ``workers``) is
reported as needing a restart and is not applied: the daemon keeps running on the values it started with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from learnerd.daemon.config import Config
from learnerd.daemon.logging import configure_logging, current_level, json_choice, set_log_level
from learnerd.runtime.workqueue import ControllerRateLimiter

log = structlog.get_logger(__name__)

_LIVE_PREFIXES = ("logging.", "workqueue.", "shutdown.")
_LIVE_CONTROLLER_KEYS = ("timeout_s", "max_retries")


@dataclass
class ReloadResult:
    """What a reload found: ``changed`` maps a dotted key to its (old, new) values."""

    config_path: str
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)
    log_level: str = ""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, BaseModel):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    if isinstance(value, dict) and not (prefix.endswith("by_language.")):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, Path):
        value = str(value)
    elif isinstance(value, list):
        value = [str(v) if isinstance(v, Path) else v for v in value]
    return {prefix[:-1]: value}


def diff_configs(old: Config, new: Config) -> dict[str, tuple[Any, Any]]:
    """Every setting that differs, as ``{"workqueue.qps": (10.0, 3.5), …}`` (the ``path`` is ignored)."""
    a = _flatten(old.model_copy(update={"path": None}))
    b = _flatten(new.model_copy(update={"path": None}))
    return {key: (a.get(key), b.get(key)) for key in sorted(a.keys() | b.keys()) if a.get(key) != b.get(key)}


def is_live_setting(key: str) -> bool:
    """True for a dotted setting (``"workqueue.qps"``) that a reload applies without a restart."""
    if key.startswith(_LIVE_PREFIXES):
        return True
    parts = key.split(".")
    return len(parts) == 3 and parts[0] == "controllers" and parts[2] in _LIVE_CONTROLLER_KEYS


def apply_config(daemon: Any, new: Config) -> ReloadResult:
    """Apply the live settings of ``new`` to ``daemon`` (a :class:`~learnerd.daemon.app.Daemon`) and
    record them in ``daemon.cfg``; report the rest as needing a restart.

    ``new`` must be validated (``load_config`` does); nothing here can fail half-way.
    """
    cfg: Config = daemon.cfg
    result = ReloadResult(config_path=str(new.path) if new.path else "")
    result.changed = diff_configs(cfg, new)
    # The level is compared as it takes effect: "" in the file leaves the current level alone.
    result.changed.pop("logging.level", None)
    level = new.logging.level or current_level()
    if level != current_level():  # also when the file's level replaces one set by `ctl log-level`
        result.changed["logging.level"] = (current_level(), level)
    result.needs_restart = [key for key in result.changed if not is_live_setting(key)]
    result.applied = [key for key in result.changed if is_live_setting(key)]

    for queue in daemon.queues.values():
        limiter = queue.rate_limiter
        if isinstance(limiter, ControllerRateLimiter):
            limiter.reconfigure(new.workqueue)
    cfg.workqueue = new.workqueue

    for name, controller in daemon.controllers.items():
        fresh = new.controller(name)
        controller.configure(timeout_s=fresh.timeout_s, max_retries=fresh.max_retries)
    cfg.controllers = {
        name: new.controller(name).model_copy(update={"workers": cfg.controller(name).workers})
        for name in cfg.controllers.keys() | new.controllers.keys()
    }
    cfg.shutdown = new.shutdown

    # Logged before the new level applies: the reload is reported at the level in force when it came.
    log.info("config reloaded", config=result.config_path, applied=result.applied, needs_restart=result.needs_restart)
    if result.needs_restart:
        log.warning("some config changes need a restart to take effect", keys=result.needs_restart)
    if new.logging.format != cfg.logging.format:
        configure_logging(level, json_choice(new.logging.format))
    elif level != current_level():
        set_log_level(level)
    cfg.logging = new.logging
    result.log_level = current_level()
    return result
