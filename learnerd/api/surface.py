"""What the HTTP handlers need of the running daemon: :class:`ControlSurface`.

The daemon implements it (:class:`learnerd.daemon.control.DaemonControl`); the handlers in this
package depend on the protocol only, so ``api`` never imports ``daemon`` (the layer above it).
Every method may raise a :class:`~learnerd.api.errors.ControlError` subclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from learnerd.store.retrieval import SearchHit
from learnerd.store.suggestions import ServedAnswer

if TYPE_CHECKING:
    import numpy as np


class StoreCounts(TypedDict):
    """Rows in the store (``vectors``), vectors in the live index (``indexed``), committed adapter versions."""

    blocks: int
    examples: int
    vectors: int
    indexed: int
    adapters: int


class EmbedderStatus(TypedDict):
    name: str | None
    loaded: bool


class PrivacyStatus(TypedDict):
    """Secrets redacted by the analyzer and examples refused, each by kind; tombstones kept."""

    redacted: dict[str, int]
    refused: dict[str, int]
    tombstones: int


class Status(TypedDict):
    """``GET /status``: what ``learnerd ctl status`` shows (docs/operations.md); times in seconds."""

    version: str
    pid: int
    state: str
    uptime_s: float
    config_path: str | None
    state_dir: str
    log_level: str
    endpoints: dict[str, str | None]
    openai_access: dict[str, Any] | None
    embedder: EmbedderStatus
    counts: StoreCounts
    controllers: dict[str, dict[str, Any]]
    documents: dict[str, dict[str, Any]]
    analyzer: dict[str, Any]
    evaluation_failures: dict[str, dict[str, Any]]
    backfill: dict[str, Any] | None
    fleet: dict[str, Any] | None
    warnings: list[str]
    privacy: PrivacyStatus
    suggestions: dict[str, dict[str, dict[str, int]]]


class Paused(TypedDict):
    """Whether each controller is paused, by name."""

    paused: dict[str, bool]


class Requeued(TypedDict):
    controller: str
    key: str
    queue_depth: int


class Draining(TypedDict):
    state: str
    drain_timeout_s: float


class LogLevel(TypedDict):
    """The level now; ``previous``: the level before a change."""

    level: str
    previous: NotRequired[str]


class ControlSurface(Protocol):
    """The admin and search operations, each returning JSON-able data (docs/operations.md); a ``dict[str, Any]``
    is the ``to_json()`` of the job, report or tombstone it names."""

    @property
    def state(self) -> str:
        """``starting``, ``running`` or ``draining``."""
        ...

    def unready_reason(self) -> str | None:
        """Why a running daemon is not ready (a served model failed its known-answer check), or None."""
        ...

    def status(self) -> Status: ...

    def pause(self, controller: str | None = None) -> Paused: ...

    def resume(self, controller: str | None = None) -> Paused: ...

    def requeue(self, controller: str, key: str) -> Requeued: ...

    def start_backfill(self, since: float) -> dict[str, Any]: ...

    def backfill_status(self) -> dict[str, Any] | None: ...

    def drain(self) -> Draining: ...

    def reload(self) -> dict[str, Any]: ...

    def log_level(self) -> LogLevel: ...

    def set_log_level(self, level: str) -> LogLevel: ...

    async def search(self, text: str, k: int, vector: np.ndarray | None = None) -> list[SearchHit]:
        """The ``k`` learned examples nearest to ``text`` (``vector``: its embedding already made, by :meth:`embed`)."""
        ...

    @property
    def embedder_name(self) -> str:
        """The embedder's model name (known before it loads)."""
        ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``texts`` embedded by the daemon's embedder: float32 ``(len(texts), dim)``, unit rows (a worker thread).
        Raises ``Unavailable`` while the embedder loads, ``TooManyRequests`` beyond the searches queued."""
        ...

    async def forget(self, kind: str, value: str, dry_run: bool = False) -> dict[str, Any]: ...

    def tombstones(self) -> list[dict[str, Any]]: ...

    def remove_tombstone(self, tombstone_id: str) -> dict[str, Any]: ...

    def record_served(self, answer: ServedAnswer) -> None:
        """Remember an answer served (redacted first, one transaction; :mod:`learnerd.store.suggestions`).
        Never raises: a store failure is logged and the answer goes out unrecorded."""
        ...
