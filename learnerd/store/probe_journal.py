"""The probe journal: probes injected over RPC, durable from the moment they are accepted until they are
written into their document.

An append-only JSON Lines file (UTF-8, one object per line, ``<state_dir>/journals/injected-probes.jsonl``)::

    {"op": "accept", "probe": {"id": "…", "document": "/abs/learned.dlm", "prompt": "…", "reference": "…",
                               "tags": ["…"], "source_addr": "127.0.0.1", "accepted_at": 1767225600.25}}
    {"op": "consume", "ids": ["…", "…"]}

:meth:`ProbeJournal.append` writes a group of ``accept`` lines with one ``write(2)`` and returns after
``fsync(2)``: the RPC server answers 200 only after that, so an acknowledged probe survives a crash or a
power loss. :meth:`ProbeJournal.consume` appends (and fsyncs) a ``consume`` line once the probes are in
their document; the probes still *pending* are those accepted and never consumed.

Crash safety: a crash in the middle of an append leaves at most a torn last line — a probe whose append
never returned, so never acknowledged — which :class:`ProbeJournal` drops when it opens the file. Opening
also compacts: the file is rewritten atomically (temp file, fsync, rename, fsync the directory) with only
the pending probes; so does a :meth:`~ProbeJournal.consume` that leaves nothing pending once the file
has grown past :data:`COMPACT_BYTES`. A crash between a document write and its ``consume`` leaves the
probes pending: the consumer must be idempotent (the training reconciler skips a probe whose section is
already in the document: section ids are content hashes).

Thread-safe: every method takes the journal's lock (the RPC server appends from the event loop's
worker threads while the training reconciler consumes from another).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.store.atomic import append_synced, atomic_write_bytes, fsync_dir

log = structlog.get_logger(__name__)

COMPACT_BYTES = 1024 * 1024
"""A consume that leaves nothing pending rewrites the file once it is larger than this (bytes)."""

SOURCE_TAG = "rpc-inject"
"""The tag of an injected probe's harvest marker source: ``rpc-inject/<tag or slug>`` (dlm's)."""
_SLUG_RE = re.compile(r"[^a-z0-9._-]+")
MAX_SLUG_CHARS = 48


class JournalError(Exception):
    """The journal file holds a line that is not a journal record (other than a torn last line), or a
    probe for a document outside the allowed ones."""


@dataclass(frozen=True)
class InjectedProbe:
    """One accepted probe: a ``prompt`` and the ``reference`` answer for ``document`` (an absolute path).

    ``id`` is 32 random hex digits; ``accepted_at`` the server's receipt time (Unix seconds);
    ``source_addr`` the client's address.
    """

    id: str
    document: str
    prompt: str
    reference: str
    tags: tuple[str, ...] = ()
    source_addr: str = ""
    accepted_at: float = 0.0

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(16)

    @property
    def harvest_source(self) -> str:
        """``rpc-inject/<name>``: the name is the first tag, else the prompt's first words, as a slug
        (lower case, runs of other characters than ``a-z0-9._-`` made ``-``, at most 48 characters;
        ``probe`` if nothing is left). dlm names it from the same parts (``src/dlm/watch/loop.py``)."""
        name = self.tags[0] if self.tags else self.prompt
        slug = _SLUG_RE.sub("-", name.lower())[:MAX_SLUG_CHARS].strip("-.") or "probe"
        return f"{SOURCE_TAG}/{slug}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "document": self.document,
            "prompt": self.prompt,
            "reference": self.reference,
            "tags": list(self.tags),
            "source_addr": self.source_addr,
            "accepted_at": self.accepted_at,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> InjectedProbe:
        """Raises ``KeyError`` / ``TypeError`` / ``ValueError`` on a malformed record."""
        tags = raw.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ValueError("tags must be a list of strings")
        for key in ("id", "document", "prompt", "reference"):
            if not isinstance(raw[key], str):
                raise TypeError(f"{key} must be a string")
        return cls(
            id=raw["id"],
            document=raw["document"],
            prompt=raw["prompt"],
            reference=raw["reference"],
            tags=tuple(tags),
            source_addr=str(raw.get("source_addr", "")),
            accepted_at=float(raw.get("accepted_at", 0.0)),
        )


class ProbeJournal:
    """The journal file at ``path`` (its directory is created, mode 0700). See the module docstring.

    Args:
        path: the journal file.
        document_allowed: whether a probe's ``document`` may be written (e.g. a
            :class:`~learnerd.store.routing.DocumentScope`); None: any.

    Raises:
        JournalError: a line other than the last is not a journal record (the file was damaged), or an
            accepted probe names a document that ``document_allowed`` refuses (line number and path given;
            learnerd never writes a file a journal line chose).
        OSError: the file cannot be read or written.
    """

    def __init__(self, path: str | os.PathLike[str], document_allowed: Callable[[str], bool] | None = None) -> None:
        self.path = Path(path)
        self._document_allowed = document_allowed
        self._lock = threading.Lock()
        self._pending: dict[str, InjectedProbe] = {}  # insertion order = acceptance order
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._load()
        self._rewrite()
        self._fd = self._open()

    def __len__(self) -> int:
        """Probes pending (accepted, not consumed)."""
        return len(self._pending)

    def pending(self, document: str | None = None) -> list[InjectedProbe]:
        """Pending probes in acceptance order; only those for ``document`` when given."""
        with self._lock:
            return [p for p in self._pending.values() if document is None or p.document == document]

    def documents(self) -> list[str]:
        """The documents with pending probes, in order of their oldest probe."""
        with self._lock:
            return list(dict.fromkeys(p.document for p in self._pending.values()))

    @staticmethod
    def encode(probe: InjectedProbe) -> bytes:
        """``probe``'s ``accept`` line, UTF-8, newline-terminated.

        Raises:
            ValueError: a field cannot be encoded (``UnicodeEncodeError``: a lone UTF-16 surrogate).
        """
        return _line({"op": "accept", "probe": probe.to_dict()})

    def append(self, probes: Sequence[InjectedProbe]) -> None:
        """Record ``probes`` as accepted: one write, then fsync. When it returns they are durable.

        Check each probe alone first with :meth:`encode` (the probe inbox does, before a probe joins a
        group commit): one probe that cannot be encoded fails the whole call.

        Raises:
            ValueError: a probe id is already pending, or a probe cannot be encoded.
            OSError: the write or the fsync failed; then none of ``probes`` counts as accepted (a
                partial line left behind is dropped at the next open).
        """
        if not probes:
            return
        lines = b"".join(self.encode(p) for p in probes)
        with self._lock:
            if any(p.id in self._pending for p in probes):
                raise ValueError("a probe with this id is already pending")
            append_synced(self._fd, lines)
            for probe in probes:
                self._pending[probe.id] = probe

    def consume(self, ids: Iterable[str]) -> int:
        """Record the probes ``ids`` as written into their document (fsynced); unknown ids are ignored.

        Returns:
            how many pending probes this consumed.
        """
        with self._lock:
            known = [i for i in dict.fromkeys(ids) if i in self._pending]
            if not known:
                return 0
            append_synced(self._fd, _line({"op": "consume", "ids": known}))
            for probe_id in known:
                del self._pending[probe_id]
            if not self._pending and os.fstat(self._fd).st_size > COMPACT_BYTES:
                os.close(self._fd)
                self._rewrite()
                self._fd = self._open()
            return len(known)

    def forget(self, holds: Callable[[InjectedProbe], bool], *, dry_run: bool = False) -> int:
        """Drop the pending probes ``holds`` accepts, and rewrite the file atomically with the pending probes
        only, so no line of a dropped probe, nor of one already consumed, is left (``learnerd forget --match``).
        With ``dry_run`` nothing changes. Returns how many pending probes ``holds`` accepted.

        Raises:
            OSError: the file could not be rewritten (then nothing was dropped).
        """
        with self._lock:
            dropped = [probe_id for probe_id, probe in self._pending.items() if holds(probe)]
            if dry_run:
                return len(dropped)
            kept = {i: p for i, p in self._pending.items() if i not in dropped}
            pending, self._pending = self._pending, kept
            try:
                os.close(self._fd)
                self._fd = -1
                self._rewrite()
            except OSError:
                self._pending = pending
                raise
            finally:
                if self._fd < 0:
                    self._fd = self._open()
            return len(dropped)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the file ends in a newline, else an unfinished last line
        if torn:
            log.warning("probe_journal.torn_line_dropped", path=str(self.path), bytes=len(torn))
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if record["op"] == "accept":
                    probe = InjectedProbe.from_dict(record["probe"])
                    self._check_document(probe, number)
                    self._pending[probe.id] = probe
                elif record["op"] == "consume":
                    for probe_id in record["ids"]:
                        self._pending.pop(probe_id, None)
                else:
                    raise ValueError(f"unknown op {record['op']!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise JournalError(f"{self.path}:{number}: not a probe journal record: {exc}") from None

    def _check_document(self, probe: InjectedProbe, number: int) -> None:
        if self._document_allowed is not None and not self._document_allowed(probe.document):
            raise JournalError(
                f"{self.path}:{number}: probe {probe.id} names the document {probe.document!r}, which is not "
                "under docs_dirs nor the [rpc] document; refusing the journal (move that line out to start)"
            )

    def _rewrite(self) -> None:
        """Replace the file atomically with the accept lines of the pending probes only."""
        data = b"".join(_line({"op": "accept", "probe": p.to_dict()}) for p in self._pending.values())
        atomic_write_bytes(self.path, data, mode=0o600)

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fsync_dir(self.path.parent)
        return fd


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
