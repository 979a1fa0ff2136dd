"""Rate-limited logging of repeated events: one line per kind per interval, with the count it stands for.

A hostile client can make the same failure happen thousands of times a second (refused tokens, bad
bodies, connections over the cap); logging each would flood the log and cost more than the failure.
:class:`LogThrottle` logs the first occurrence of a kind at once, then at most one line per
``interval_s`` seconds for that kind, carrying ``suppressed=n``: how many were not logged since the
previous line. Counting is exact; only the lines are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL_S = 10.0


class LogThrottle:
    """Per-kind log rate limiter (see the module docstring). Use from one thread (the event loop).

    Args:
        interval_s: at most one line per kind per this many seconds.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        """Occurrences of each kind so far, logged or not."""

    def info(self, kind: str, event: str, **fields: Any) -> bool:
        """Log ``event`` at info level unless ``kind`` was logged less than ``interval_s`` ago; return
        whether it was logged."""
        return self._emit(log.info, kind, event, fields)

    def warning(self, kind: str, event: str, **fields: Any) -> bool:
        """Like :meth:`info`, at warning level."""
        return self._emit(log.warning, kind, event, fields)

    def exception(self, kind: str, event: str, **fields: Any) -> bool:
        """Like :meth:`warning`, at error level with the current exception's traceback."""
        return self._emit(log.exception, kind, event, fields)

    def _emit(self, method: Callable[..., Any], kind: str, event: str, fields: dict[str, Any]) -> bool:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._last[kind] = now
        method(event, suppressed=self._suppressed.pop(kind, 0), **fields)
        return True
