"""The errors an API operation raises; :func:`learnerd.api.http.error_middleware` maps each to its status.

The message of each is for the user: it is sent as ``{"error": "message"}``.
"""

from __future__ import annotations


class ControlError(Exception):
    """A request the daemon cannot carry out; the message is for the user."""


class BadRequest(ControlError):
    """The request is malformed or a value is out of range (HTTP 400)."""


class NotFound(ControlError):
    """An unknown controller, key or job (HTTP 404)."""


class Conflict(ControlError):
    """Not now: the daemon is draining, or a backfill is already running (HTTP 409)."""


class Unavailable(ControlError):
    """Not yet: the embedder is still loading (HTTP 503)."""
