"""The versioned adapter store: every LoRA adapter ever committed for a document, and which is current.

Layout, per document (``doc_key`` chosen by the caller: letters, digits, ``._-``)::

    <root>/<doc_key>/
        current                  "v0003\\n" — the version readers use; replaced atomically
        .lock                    flock(2) held while a version is committed
        versions/
            v0001/               adapter_config.json, adapter_model.safetensors (peft save_pretrained),
            v0002/               metadata.json (:class:`AdapterMetadata`)
            v0003/
            .staging-k3j2x/      a version being written (flock(2) held on the directory by its writer)

Crash safety. A version is written into a ``.staging-*`` directory; :meth:`AdapterStore.commit` writes
``metadata.json``, fsyncs every file and directory in it, renames it to the next ``vNNNN`` (rename(2) is
atomic), fsyncs ``versions/``, and only then replaces ``current`` (temp file, fsync, rename, fsync). A
crash at any point leaves ``current`` naming the previous complete version; readers list only ``vNNNN``
directories, which exist only complete. A staging directory whose writer died (its flock is free) is
removed by :meth:`AdapterStore.recover` — call it at start-up.

With a :class:`CommitLedger` (a fleet on PostgreSQL, :mod:`learnerd.fleet.ledger`) the ledger's
transaction is the commit point instead: under the document's lock in that transaction the version
number is allocated from the ledger's rows, the staging directory is renamed into place, the row is
recorded, and the transaction commits; if it fails the renamed directory is removed again. Readers
(:meth:`AdapterStore.list_versions`, :meth:`AdapterStore.current`, :meth:`AdapterStore.resolve`) see only
versions with a row, so a directory renamed by a replica that died before its COMMIT is never served;
:meth:`AdapterStore.recover` moves such orphans aside (``versions/.orphan-vNNNN-<epoch s>``).

The store knows nothing of training: it takes a directory and metadata, and gives them back.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from learnerd.store.atomic import atomic_write_text, fsync_dir, fsync_tree

METADATA_FILE = "metadata.json"
METADATA_SCHEMA_VERSION = 1
CURRENT_FILE = "current"
_VERSION_RE = re.compile(r"^v(\d{4,})$")
_REF_RE = re.compile(r"^v?(\d+)$")
_DOC_KEY_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_STAGING_PREFIX = ".staging-"
_ORPHAN_PREFIX = ".orphan-"


class AdapterStoreError(Exception):
    """An unknown document key or version, an invalid key, or unreadable metadata."""


@dataclass(frozen=True)
class AdapterMetadata:
    """What a committed adapter version was trained from and how (``metadata.json``).

    Losses are mean cross-entropy per loss-carrying token in nats; ``section_ids`` are the dlm
    section ids of every row the adapter now embodies (the document's training rows at that cycle),
    ``new_section_ids`` / ``replay_section_ids`` those trained on in this cycle; ``created_at`` is
    ISO 8601 UTC. ``version`` is assigned by :meth:`AdapterStore.commit` (0 before).
    """

    base_model: str
    base_model_identity: str
    section_ids: tuple[str, ...]
    new_section_ids: tuple[str, ...]
    replay_section_ids: tuple[str, ...]
    parent_version: int | None
    steps: int
    start_loss: float
    final_loss: float
    tokens_trained: int
    seed: int
    hyperparameters: dict[str, Any]
    library_versions: dict[str, str]
    created_at: str
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = METADATA_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("section_ids", "new_section_ids", "replay_section_ids"):
            out[key] = list(out[key])
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> AdapterMetadata:
        """Raises ``KeyError`` / ``TypeError`` on a malformed dict (wrapped by the store)."""
        values = dict(raw)
        for key in ("section_ids", "new_section_ids", "replay_section_ids"):
            values[key] = tuple(values[key])
        return cls(**values)


@dataclass(frozen=True)
class AdapterVersion:
    """One complete, committed adapter version; ``path`` is the directory peft loads."""

    doc_key: str
    number: int
    path: Path

    @property
    def name(self) -> str:
        """``v`` and the zero-padded number, e.g. ``v0003``."""
        return version_name(self.number)

    def metadata(self) -> AdapterMetadata:
        """Read ``metadata.json``. Raises :class:`AdapterStoreError` if it is unreadable."""
        file = self.path / METADATA_FILE
        try:
            return AdapterMetadata.from_dict(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AdapterStoreError(f"{file}: unreadable adapter metadata: {exc}") from exc


@dataclass(frozen=True)
class Staging:
    """A directory to write one new version into (see :meth:`AdapterStore.stage`)."""

    doc_key: str
    path: Path


class LedgerTransaction(Protocol):
    """One open ledger transaction on one document, holding the document's commit lock."""

    @property
    def versions(self) -> frozenset[int]:
        """The document's recorded version numbers, read under the lock."""
        ...

    def record(self, number: int) -> None:
        """Record ``number`` as committed; it becomes visible when the transaction commits."""
        ...


class CommitLedger(Protocol):
    """Where adapter versions are recorded as committed, transactionally (a database table).

    Implemented by :class:`learnerd.fleet.ledger.AdapterLedger` over PostgreSQL's ``adapter_commits``.
    """

    def versions(self, doc_key: str) -> frozenset[int]:
        """The recorded version numbers of ``doc_key`` (committed transactions only)."""
        ...

    def transaction(self, doc_key: str, *, wait: bool = True) -> AbstractContextManager[LedgerTransaction | None]:
        """A transaction holding ``doc_key``'s commit lock (one at a time per document, across processes),
        committed when the block exits normally and rolled back when it raises; the block gets None
        when ``wait`` is False and the lock is held elsewhere."""
        ...

    def close(self) -> None:
        """Release the ledger's connections (reopened at the next use)."""
        ...


def version_name(number: int) -> str:
    """``3`` → ``v0003``."""
    return f"v{number:04d}"


class AdapterStore:
    """Adapters of every document under ``root`` (e.g. ``<state_dir>/adapters``); with ``ledger`` (a fleet
    on PostgreSQL) a version is committed when its ledger row is (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], ledger: CommitLedger | None = None) -> None:
        self.root = Path(root)
        self.ledger = ledger

    def close(self) -> None:
        """Release the ledger's connection, if any (the store stays usable)."""
        if self.ledger is not None:
            self.ledger.close()

    def doc_dir(self, doc_key: str) -> Path:
        """``<root>/<doc_key>``. Raises :class:`AdapterStoreError` for a key that is not a safe file name."""
        if not isinstance(doc_key, str) or not _DOC_KEY_RE.match(doc_key):
            raise AdapterStoreError(f"invalid document key {doc_key!r} (letters, digits, '.', '_', '-'; max 128)")
        return self.root / doc_key

    def doc_keys(self) -> list[str]:
        """Keys of the documents with a store directory, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _DOC_KEY_RE.match(p.name))

    def list_versions(self, doc_key: str) -> list[AdapterVersion]:
        """Complete versions of ``doc_key``, oldest first (empty for an unknown document); with a ledger,
        only those it records.

        Raises:
            psycopg.Error: (with a ledger) the database is unreachable.
        """
        found = self._directories(doc_key)
        if self.ledger is not None and found:
            recorded = self.ledger.versions(doc_key)
            found = [v for v in found if v.number in recorded]
        return found

    def _directories(self, doc_key: str) -> list[AdapterVersion]:
        """Every ``vNNNN`` directory of ``doc_key``, oldest first, recorded in the ledger or not."""
        versions_dir = self.doc_dir(doc_key) / "versions"
        if not versions_dir.is_dir():
            return []
        found = []
        for entry in versions_dir.iterdir():
            match = _VERSION_RE.match(entry.name)
            if match and entry.is_dir():
                found.append(AdapterVersion(doc_key, int(match.group(1)), entry))
        return sorted(found, key=lambda v: v.number)

    def current(self, doc_key: str) -> AdapterVersion | None:
        """The version ``current`` names, or None when nothing was ever committed. With a ledger: the
        newest version it records (``current`` is written after each commit, for people to read).

        Raises:
            AdapterStoreError: ``current`` names a version that does not exist (never happens
                through this API; it means someone edited the store by hand).
            psycopg.Error: (with a ledger) the database is unreachable.
        """
        if self.ledger is not None:
            versions = self.list_versions(doc_key)
            return versions[-1] if versions else None
        pointer = self.doc_dir(doc_key) / CURRENT_FILE
        try:
            name = pointer.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        match = _VERSION_RE.match(name)
        path = self.doc_dir(doc_key) / "versions" / name
        if not match or not path.is_dir():
            raise AdapterStoreError(f"{pointer} names {name!r}, which is not a committed version")
        return AdapterVersion(doc_key, int(match.group(1)), path)

    def resolve(self, doc_key: str, ref: str | int) -> AdapterVersion:
        """A version by reference: ``"current"``, ``"v3"``, ``"v0003"``, ``"3"`` or ``3``.

        Raises:
            AdapterStoreError: no such version (the message lists the ones that exist).
        """
        if ref == "current":
            version = self.current(doc_key)
            if version is None:
                raise AdapterStoreError(f"document {doc_key!r} has no adapter yet")
            return version
        match = _REF_RE.match(str(ref))
        if not match:
            raise AdapterStoreError(f"not an adapter version: {ref!r} (expected current, vN or N)")
        number = int(match.group(1))
        versions = self.list_versions(doc_key)
        for version in versions:
            if version.number == number:
                return version
        have = ", ".join(v.name for v in versions) or "none"
        raise AdapterStoreError(f"document {doc_key!r} has no adapter {version_name(number)} (versions: {have})")

    @contextlib.contextmanager
    def stage(self, doc_key: str) -> Iterator[Staging]:
        """A fresh staging directory for a new version of ``doc_key``, locked for the caller's lifetime.

        Write the adapter files into ``staging.path``, then :meth:`commit` it inside the ``with`` block.
        On leaving the block without a commit (an error, a cancellation) the directory is removed; if
        the process dies instead, :meth:`recover` removes it later.
        """
        versions_dir = self.doc_dir(doc_key) / "versions"
        versions_dir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=versions_dir))
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield Staging(doc_key, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                if path.exists():
                    shutil.rmtree(path)
            os.close(fd)

    def commit(self, staging: Staging, metadata: AdapterMetadata) -> AdapterVersion:
        """Make ``staging`` the next version of its document and point ``current`` at it.

        Writes ``metadata.json`` (with ``version`` filled in), fsyncs the whole directory, renames it to
        ``versions/vNNNN`` (N = highest existing + 1), fsyncs ``versions/``, then replaces ``current``.

        With a ledger, N = the highest recorded + 1, and the rename happens inside the ledger's transaction
        (module docstring): a directory already at ``vNNNN`` is an orphan and is moved aside first; if the
        transaction fails the renamed directory is removed.

        Returns:
            the committed version.

        Raises:
            AdapterStoreError: ``staging`` holds no ``adapter_config.json`` (nothing was saved into it).
            OSError: the disk failed; ``current`` is then unchanged.
            psycopg.Error: (with a ledger) the transaction failed; nothing was committed.
        """
        if not (staging.path / "adapter_config.json").is_file():
            raise AdapterStoreError(f"{staging.path}: no adapter_config.json; save the adapter before committing")
        doc_dir = self.doc_dir(staging.doc_key)
        if self.ledger is not None:
            return self._commit_recorded(self.ledger, staging, metadata)
        with self._doc_lock(doc_dir):
            existing = self.list_versions(staging.doc_key)
            number = (existing[-1].number if existing else 0) + 1
            target = self._install(staging, metadata, number)
            atomic_write_text(doc_dir / CURRENT_FILE, version_name(number) + "\n")
        return AdapterVersion(staging.doc_key, number, target)

    def _install(self, staging: Staging, metadata: AdapterMetadata, number: int) -> Path:
        """Write ``metadata.json``, fsync, rename ``staging`` to ``versions/vNNNN``, fsync; returns the path."""
        meta = {**metadata.to_dict(), "version": number}
        (staging.path / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", "utf-8")
        fsync_tree(staging.path)
        target = self.doc_dir(staging.doc_key) / "versions" / version_name(number)
        os.rename(staging.path, target)
        fsync_dir(target.parent)
        return target

    def _commit_recorded(self, ledger: CommitLedger, staging: Staging, metadata: AdapterMetadata) -> AdapterVersion:
        doc_dir = self.doc_dir(staging.doc_key)
        target: Path | None = None
        try:
            with ledger.transaction(staging.doc_key) as txn:
                assert txn is not None  # waited for the lock
                number = max(txn.versions, default=0) + 1
                orphan = doc_dir / "versions" / version_name(number)
                if orphan.exists():  # renamed by a commit whose transaction never committed
                    self._set_aside(orphan)
                target = self._install(staging, metadata, number)
                txn.record(number)
        except BaseException:
            if target is not None:
                shutil.rmtree(target, ignore_errors=True)
                with contextlib.suppress(OSError):
                    fsync_dir(target.parent)
            raise
        with contextlib.suppress(OSError):  # informational: readers ask the ledger
            atomic_write_text(doc_dir / CURRENT_FILE, version_name(number) + "\n")
        return AdapterVersion(staging.doc_key, number, target)

    @staticmethod
    def _set_aside(version_dir: Path) -> Path:
        """Rename an orphan ``vNNNN`` to ``.orphan-vNNNN-<epoch s>`` beside it (listed by no reader)."""
        aside = version_dir.with_name(f"{_ORPHAN_PREFIX}{version_dir.name}-{time.time_ns() // 1_000_000_000}")
        os.rename(version_dir, aside)
        fsync_dir(version_dir.parent)
        return aside

    def recover(self) -> list[Path]:
        """Remove staging directories whose writer is gone (a crash mid-training). Call at start-up. With a
        ledger, also move aside every ``vNNNN`` directory it does not record (:meth:`set_aside_orphans`).

        Returns:
            the directories removed or moved aside.

        Raises:
            psycopg.Error: (with a ledger) the database is unreachable.
        """
        removed: list[Path] = []
        for doc_key in self.doc_keys():
            doc_dir = self.doc_dir(doc_key)
            versions_dir = doc_dir / "versions"
            if not versions_dir.is_dir():
                continue
            with self._doc_lock(doc_dir):
                for entry in versions_dir.glob(_STAGING_PREFIX + "*"):
                    if entry.is_dir() and _lock_is_free(entry):
                        shutil.rmtree(entry, ignore_errors=True)
                        removed.append(entry)
        return removed + self.set_aside_orphans()

    def set_aside_orphans(self) -> list[Path]:
        """(With a ledger) rename every ``vNNNN`` directory without a ledger row — renamed by a commit
        whose transaction never committed — to ``.orphan-vNNNN-<epoch s>``, under the document's ledger
        lock (a document whose lock is held, a commit in flight, is left for the next call). Without a
        ledger: nothing.

        Returns:
            the orphans' new paths.

        Raises:
            psycopg.Error: the database is unreachable.
        """
        if self.ledger is None:
            return []
        moved: list[Path] = []
        for doc_key in self.doc_keys():
            if not self._directories(doc_key):
                continue
            with self.ledger.transaction(doc_key, wait=False) as txn:
                if txn is None:
                    continue
                for version in self._directories(doc_key):
                    if version.number not in txn.versions:
                        moved.append(self._set_aside(version.path))
        return moved

    @contextlib.contextmanager
    def _doc_lock(self, doc_dir: Path) -> Iterator[None]:
        doc_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(doc_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _lock_is_free(directory: Path) -> bool:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
