"""What the HTTP handlers need of the running daemon: :class:`ControlSurface`.

The daemon implements it (:class:`learnerd.daemon.control.DaemonControl`); the handlers in this
package depend on the protocol only, so ``api`` never imports ``daemon`` (the layer above it).
Every method may raise a :class:`~learnerd.api.errors.ControlError` subclass.
"""

from __future__ import annotations

from typing import Any, Protocol

from learnerd.store.suggestions import ServedAnswer


class ControlSurface(Protocol):
    """The admin and search operations, each returning JSON-able data (docs/operations.md)."""

    @property
    def state(self) -> str:
        """``starting``, ``running`` or ``draining``."""
        ...

    def unready_reason(self) -> str | None:
        """Why a running daemon is not ready (a served model failed its known-answer check), or None."""
        ...

    def status(self) -> dict[str, Any]: ...

    def pause(self, controller: str | None = None) -> dict[str, Any]: ...

    def resume(self, controller: str | None = None) -> dict[str, Any]: ...

    def requeue(self, controller: str, key: str) -> dict[str, Any]: ...

    def start_backfill(self, since: float) -> dict[str, Any]: ...

    def backfill_status(self) -> dict[str, Any] | None: ...

    def drain(self) -> dict[str, Any]: ...

    def reload(self) -> dict[str, Any]: ...

    def log_level(self) -> dict[str, Any]: ...

    def set_log_level(self, level: str) -> dict[str, Any]: ...

    async def search(self, text: str, k: int) -> list[Any]: ...

    async def forget(self, kind: str, value: str, dry_run: bool = False) -> dict[str, Any]: ...

    def tombstones(self) -> list[dict[str, Any]]: ...

    def remove_tombstone(self, tombstone_id: str) -> dict[str, Any]: ...

    def record_served(self, answer: ServedAnswer) -> None:
        """Remember an answer served (redacted first, one transaction; :mod:`learnerd.store.suggestions`).
        Never raises: a store failure is logged and the answer goes out unrecorded."""
        ...
