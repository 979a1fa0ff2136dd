"""Rate-limited logging of repeated events: one line per kind per interval, with the count it stands for.

A hostile client can make the same failure happen thousands of times a second (refused tokens, bad
bodies, connections over the cap); logging each would flood the log and cost more than the failure.
:class:`LogThrottle` logs the first ``burst`` occurrences of a kind in a window of ``interval_s`` seconds at
once, and no more of that kind until the window ends; the next line logged carries ``suppressed=n``: how
many were not logged since the previous line. Counting is exact; only the lines are dropped.
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
        interval_s: the window, seconds.
        clock: monotonic seconds (injected by tests).
        burst: lines of one kind logged per window (1: one line per ``interval_s``).
    """

    def __init__(
        self, interval_s: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic, burst: int = 1
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._burst = burst
        self._window: dict[str, tuple[float, int]] = {}  # kind -> (window start, lines logged in it)
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
        start, logged = self._window.get(kind, (now, 0))
        if now - start >= self.interval_s:
            start, logged = now, 0
        if logged >= self._burst:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._window[kind] = (start, logged + 1)
        method(event, suppressed=self._suppressed.pop(kind, 0), **fields)
        return True
