"""The errors an API operation raises; :func:`learnerd.api.http.error_middleware` maps each to its status.

The message of each is for the user: it is sent as ``{"error": "message", **fields}``, with ``headers``
added to the response (``Retry-After``, ``WWW-Authenticate``).
"""

from __future__ import annotations

from typing import Any


class ControlError(Exception):
    """A request the daemon cannot carry out; the message is for the user. ``status``: its HTTP status.

    Args:
        message: the ``error`` text of the answer.
        headers: response headers to add.
        fields: more members of the JSON answer (e.g. ``queue_depth``).
    """

    status = 400

    def __init__(self, message: str, *, headers: dict[str, str] | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.fields = fields


class BadRequest(ControlError):
    """The request is malformed or a value is out of range (HTTP 400)."""


class Unauthorized(ControlError):
    """Missing or wrong credentials (HTTP 401)."""

    status = 401


class NotFound(ControlError):
    """An unknown controller, key, job, path or RPC method (HTTP 404)."""

    status = 404


class MethodNotAllowed(ControlError):
    """The path exists but not for this HTTP method (HTTP 405; give ``Allow`` in ``headers``)."""

    status = 405


class RequestTimeout(ControlError):
    """The client sent its body too slowly (HTTP 408)."""

    status = 408


class Conflict(ControlError):
    """Not now: the daemon is draining, or a backfill is already running (HTTP 409)."""

    status = 409


class PayloadTooLarge(ControlError):
    """The body is larger than the endpoint accepts (HTTP 413)."""

    status = 413


class TooManyRequests(ControlError):
    """A bounded queue is full: retry after ``retry_after_s`` seconds (HTTP 429 with ``Retry-After``)."""

    status = 429

    def __init__(self, message: str, *, retry_after_s: int = 1, **fields: Any) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)}, **fields)
        self.retry_after_s = retry_after_s


class Unavailable(ControlError):
    """Not yet: the embedder is still loading (HTTP 503)."""

    status = 503
