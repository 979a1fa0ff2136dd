"""Messages between replicas over PostgreSQL's LISTEN/NOTIFY, on the channel :data:`CHANNEL`.

A message is a JSON object ``{"r": sender replica id, "q": queue name or "vectors", "k": [keys]}``
(UTF-8; one NOTIFY payload is at most 8000 bytes, so :func:`payloads` splits long key lists).
``q`` names a workqueue: the receiver adds each key it owns to that queue. ``"vectors"``: the keys'
rows in the ``embeddings`` table changed; the receiver reloads them into its vector index.

NOTIFY is delivered to every listening session after the sending transaction commits, and is lost for
a session that is not connected at that moment: a replica whose listening connection drops resyncs
(level-triggered) once it is back, which covers whatever it missed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

CHANNEL = "learnerd"
VECTORS = "vectors"
ADAPTERS = "adapters"
"""The pseudo-queue of adapter commits: the keys are document keys (sent by the committing transaction)."""
MAX_PAYLOAD_BYTES = 7900
"""Below PostgreSQL's 8000-byte NOTIFY payload limit."""


@dataclass(frozen=True)
class Message:
    sender: str
    queue: str
    keys: tuple[str, ...]


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def payloads(sender: str, queue: str, keys: Sequence[str]) -> Iterator[str]:
    """JSON payloads carrying ``keys``, each under :data:`MAX_PAYLOAD_BYTES` (UTF-8).

    Raises:
        ValueError: one key alone does not fit in a payload.
    """
    empty = len(_dump({"r": sender, "q": queue, "k": []}).encode())
    batch: list[str] = []
    size = empty
    for key in keys:
        key_size = len(_dump(key).encode()) + 1  # the key and its comma
        if size + key_size > MAX_PAYLOAD_BYTES:
            if not batch:
                raise ValueError(f"key too long for a NOTIFY payload: {key[:80]!r}…")
            yield _dump({"r": sender, "q": queue, "k": batch})
            batch, size = [], empty
        batch.append(key)
        size += key_size
    if batch:
        yield _dump({"r": sender, "q": queue, "k": batch})


def parse(payload: str) -> Message:
    """The message in ``payload``. Raises ValueError (or KeyError/TypeError) on a malformed one."""
    raw = json.loads(payload)
    keys = raw["k"]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("k must be a list of strings")
    return Message(str(raw["r"]), str(raw["q"]), tuple(keys))
