"""Capture every structlog event of a block, debug included, whatever level an earlier test configured."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import structlog
import structlog.testing


@contextlib.contextmanager
def capture_all_logs() -> Iterator[list[dict[str, Any]]]:
    """``structlog.testing.capture_logs()`` with the level filter lowered to debug for the block (the daemon's
    ``configure_logging`` in an earlier test may have left an info-level filter, which drops debug events
    before they are captured)."""
    previous = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(wrapper_class=previous)
