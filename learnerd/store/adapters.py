"""The versioned adapter store: every LoRA adapter ever committed for a document, and which is current.

Layout, per document (``doc_key`` chosen by the caller: letters, digits, ``._-``)::

    <root>/<doc_key>/
        current                  "v0003\\n" — the promoted version readers use; replaced atomically
        .lock                    flock(2) held while a version is committed or promoted
        versions/
            v0001/               adapter_config.json, adapter_model.safetensors (peft save_pretrained),
            v0002/               metadata.json (:class:`AdapterMetadata`), eval.json (its evaluation),
            v0003/               verdict.json (:class:`GateVerdict`: the promotion gate's decision)
            v0004/               a candidate: committed, not (yet) promoted
            .staging-k3j2x/      a version being written (flock(2) held on the directory by its writer)

A version's life (docs/evaluation.md, "The promotion gate"): :meth:`AdapterStore.commit` makes a staged
directory the next version — a *candidate*, never current; the evaluation decides on it and records its
:class:`GateVerdict` (:meth:`AdapterStore.record_verdict`); only :meth:`AdapterStore.promote` moves
``current``. A candidate newer than ``current`` (:meth:`AdapterStore.candidate`) is either awaiting its
verdict, rejected (kept with its report and verdict, never served), or promoted and about to become current
(a crash between the verdict and the promotion: the next decision promotes it).

Crash safety. A version is written into a ``.staging-*`` directory; :meth:`AdapterStore.commit` writes
``metadata.json``, fsyncs every file and directory in it, renames it to the next ``vNNNN`` (rename(2) is
atomic) and fsyncs ``versions/``. :meth:`AdapterStore.promote` replaces ``current`` (temp file, fsync,
rename, fsync). A crash at any point leaves ``current`` naming the previous promoted version; readers list
only ``vNNNN`` directories, which exist only complete. A staging directory whose writer died (its flock is
free) is removed by :meth:`AdapterStore.recover` — call it at start-up.

With a :class:`CommitLedger` (a fleet on PostgreSQL, :mod:`learnerd.fleet.ledger`) the ledger's
transaction is the commit point instead: under the document's lock in that transaction the version
number is allocated from the ledger's rows, the staging directory is renamed into place, the row is
recorded, and the transaction commits; if it fails the renamed directory is removed again. Readers
(:meth:`AdapterStore.list_versions`, :meth:`AdapterStore.current`, :meth:`AdapterStore.resolve`) see only
versions with a row, so a directory renamed by a replica that died before its COMMIT is never served;
:meth:`AdapterStore.recover` moves such orphans aside (``versions/.orphan-vNNNN-<epoch s>``). A promotion
is the row's mark (:meth:`LedgerTransaction.promote`), and ``current`` is the newest promoted row.

Integrity. :meth:`AdapterStore.commit` records the sha256 of each file of the adapter (:data:`ADAPTER_FILES`:
what peft loads) in the version's metadata (``content_sha256``); :meth:`AdapterVersion.verify` hashes them
again and raises :class:`AdapterIntegrityError` on any difference. The one loader checks it before every
adapter load (:func:`learnerd.ml.loader.load_adapter`): a corrupted adapter fails its load and is never
served, even one whose values are all finite. A version committed before hashes were recorded has none and
is loaded unchecked.

The store knows nothing of training: it takes a directory and metadata, and gives them back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
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
from typing import Any, Literal, Protocol

from learnerd.store.atomic import atomic_write_text, fsync_dir, fsync_tree

METADATA_FILE = "metadata.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
"""The files of an adapter that peft loads, hashed at commit (those present)."""
METADATA_SCHEMA_VERSION = 1
VERDICT_FILE = "verdict.json"
CURRENT_FILE = "current"
_VERSION_RE = re.compile(r"^v(\d{4,})$")
_REF_RE = re.compile(r"^v?(\d+)$")
_DOC_KEY_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_STAGING_PREFIX = ".staging-"
_ORPHAN_PREFIX = ".orphan-"


class AdapterStoreError(Exception):
    """An unknown document key or version, an invalid key, or unreadable metadata."""


class AdapterIntegrityError(AdapterStoreError):
    """An adapter's files are not the ones committed: a hash differs, or a hashed file is missing."""


def adapter_hashes(directory: Path) -> dict[str, str]:
    """File name → sha256 hex of each of :data:`ADAPTER_FILES` present in ``directory``. Raises ``OSError``."""
    hashes = {}
    for name in ADAPTER_FILES:
        path = directory / name
        if path.is_file():
            with path.open("rb") as f:
                hashes[name] = hashlib.file_digest(f, "sha256").hexdigest()
    return hashes


@dataclass(frozen=True)
class AdapterMetadata:
    """What a committed adapter version was trained from and how (``metadata.json``).

    Losses are mean cross-entropy per loss-carrying token in nats; ``section_ids`` are the dlm
    section ids of every row the adapter now embodies (the document's training rows at that cycle),
    ``new_section_ids`` / ``replay_section_ids`` those trained on in this cycle; ``created_at`` is
    ISO 8601 UTC. ``version`` and ``content_sha256`` (file name → sha256 hex of each of :data:`ADAPTER_FILES`)
    are filled in by :meth:`AdapterStore.commit` (0 and empty before; empty for a version committed before
    learnerd recorded them).
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
    content_sha256: dict[str, str] = field(default_factory=dict)

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
class GateVerdict:
    """The promotion gate's decision on one version (``verdict.json``, written by the evaluation).

    ``outcome``: ``"promoted"`` or ``"rejected"``; ``reasons``: why it was rejected, one line each (empty
    when promoted); ``checks``: every check of the gate as ``{"name", "outcome", "detail"}`` with outcome
    ``"pass"``, ``"fail"`` or ``"not applicable"``; ``baseline``: the version number it was compared with
    (the current one at the decision; None for a document's first version); ``decided_at``: ISO 8601 UTC.
    """

    outcome: Literal["promoted", "rejected"]
    reasons: tuple[str, ...]
    checks: tuple[dict[str, str], ...]
    baseline: int | None
    decided_at: str

    @property
    def promoted(self) -> bool:
        return self.outcome == "promoted"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons), "checks": [dict(c) for c in self.checks]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GateVerdict:
        """Raises ``KeyError`` / ``TypeError`` / ``ValueError`` on a malformed dict (wrapped by the store)."""
        if raw["outcome"] not in ("promoted", "rejected"):
            raise ValueError(f"unknown outcome {raw['outcome']!r}")
        return cls(
            outcome=raw["outcome"],
            reasons=tuple(str(r) for r in raw["reasons"]),
            checks=tuple({str(k): str(v) for k, v in c.items()} for c in raw["checks"]),
            baseline=raw["baseline"],
            decided_at=str(raw["decided_at"]),
        )


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

    def verify(self) -> None:
        """Check the adapter's files against the hashes recorded at commit (see the module docstring); a version
        without recorded hashes passes.

        Raises:
            AdapterIntegrityError: a file's hash differs from the recorded one, or a hashed file is missing.
            AdapterStoreError: the metadata is unreadable.
        """
        recorded = self.metadata().content_sha256
        if not recorded:
            return
        try:
            found = adapter_hashes(self.path)
        except OSError as exc:
            raise AdapterIntegrityError(f"{self.doc_key} {self.name}: cannot read its files: {exc}") from exc
        for name, digest in sorted(recorded.items()):
            if found.get(name) != digest:
                what = "is missing" if name not in found else f"has sha256 {found[name][:12]}…, not {digest[:12]}…"
                raise AdapterIntegrityError(
                    f"{self.doc_key} {self.name}: {name} {what} (recorded at commit): the adapter is damaged"
                )

    def verdict(self) -> GateVerdict | None:
        """The promotion gate's decision on this version (``verdict.json``), or None when none was recorded.

        Raises:
            AdapterStoreError: the file exists but is unreadable.
        """
        file = self.path / VERDICT_FILE
        try:
            return GateVerdict.from_dict(json.loads(file.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AdapterStoreError(f"{file}: unreadable gate verdict: {exc}") from exc


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

    @property
    def current(self) -> int | None:
        """The document's newest promoted version number (None: none), read under the lock."""
        ...

    def record(self, number: int) -> None:
        """Record ``number`` as committed (a candidate); it becomes visible when the transaction commits."""
        ...

    def promote(self, number: int) -> None:
        """Mark the recorded ``number`` promoted (current from the transaction's commit on), and tell the
        other readers (the fleet's NOTIFY, delivered at the commit)."""
        ...


class CommitLedger(Protocol):
    """Where adapter versions are recorded as committed, transactionally (a database table).

    Implemented by :class:`learnerd.fleet.ledger.AdapterLedger` over PostgreSQL's ``adapter_commits``.
    """

    def versions(self, doc_key: str) -> frozenset[int]:
        """The recorded version numbers of ``doc_key`` (committed transactions only)."""
        ...

    def current(self, doc_key: str) -> int | None:
        """The newest promoted version number of ``doc_key``, or None when none was promoted."""
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
        """The promoted version ``current`` names, or None when nothing was ever promoted. With a ledger: the
        newest version it records as promoted (``current`` is written after each promotion, for people to read).

        Raises:
            AdapterStoreError: ``current`` names a version that does not exist (never happens
                through this API; it means someone edited the store by hand).
            psycopg.Error: (with a ledger) the database is unreachable.
        """
        if self.ledger is not None:
            number = self.ledger.current(doc_key)
            found = [v for v in self._directories(doc_key) if v.number == number]
            return found[0] if found else None
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

    def latest(self, doc_key: str) -> AdapterVersion | None:
        """The newest committed version of ``doc_key`` — promoted, rejected or awaiting its verdict — or None."""
        versions = self.list_versions(doc_key)
        return versions[-1] if versions else None

    def candidate(self, doc_key: str) -> AdapterVersion | None:
        """The newest committed version when it is newer than ``current`` (not promoted: awaiting its verdict,
        rejected, or promoted by a decision whose promotion a crash interrupted), else None. Older unpromoted
        versions are superseded by it and never promoted."""
        latest, current = self.latest(doc_key), self.current(doc_key)
        if latest is None or (current is not None and latest.number <= current.number):
            return None
        return latest

    def rejected(self, doc_key: str) -> tuple[AdapterVersion, GateVerdict] | None:
        """The candidate (:meth:`candidate`) with its verdict when the gate rejected it, else None.

        Raises:
            AdapterStoreError: its ``verdict.json`` is unreadable.
        """
        candidate = self.candidate(doc_key)
        verdict = candidate.verdict() if candidate is not None else None
        return (candidate, verdict) if candidate is not None and verdict is not None and not verdict.promoted else None

    def record_verdict(self, version: AdapterVersion, verdict: GateVerdict) -> None:
        """Write ``verdict`` as ``version``'s ``verdict.json`` (atomically; it replaces an earlier one).

        Raises:
            OSError: the disk failed (no half-written file is left).
        """
        text = json.dumps(verdict.to_dict(), indent=2, sort_keys=True) + "\n"
        atomic_write_text(version.path / VERDICT_FILE, text)

    def promote(self, version: AdapterVersion) -> bool:
        """Make ``version`` current, unless ``current`` already names it or a newer version (promotions move
        forward only). Without a ledger ``current`` is replaced atomically under the document's lock; with one,
        the version's row is marked promoted in a transaction under the document's ledger lock (the fleet's
        NOTIFY goes out at its commit), and ``current`` is rewritten for people to read.

        Returns:
            whether ``current`` moved.

        Raises:
            AdapterStoreError: ``version`` is not a committed version of its document.
            OSError: the disk failed; ``current`` is then unchanged.
            psycopg.Error: (with a ledger) the transaction failed; nothing was promoted.
        """
        doc_dir = self.doc_dir(version.doc_key)
        if self.ledger is not None:
            with self.ledger.transaction(version.doc_key) as txn:
                assert txn is not None  # waited for the lock
                if version.number not in txn.versions:
                    raise AdapterStoreError(f"{version.doc_key} {version.name} is not a committed version")
                if txn.current is not None and txn.current >= version.number:
                    return False
                txn.promote(version.number)
            with contextlib.suppress(OSError):  # informational: readers ask the ledger
                atomic_write_text(doc_dir / CURRENT_FILE, version.name + "\n")
            return True
        with self._doc_lock(doc_dir):
            if version.number not in {v.number for v in self._directories(version.doc_key)}:
                raise AdapterStoreError(f"{version.doc_key} {version.name} is not a committed version")
            current = self.current(version.doc_key)
            if current is not None and current.number >= version.number:
                return False
            atomic_write_text(doc_dir / CURRENT_FILE, version.name + "\n")
        return True

    def resolve(self, doc_key: str, ref: str | int) -> AdapterVersion:
        """A version by reference: ``"current"``, ``"v3"``, ``"v0003"``, ``"3"`` or ``3``.

        Raises:
            AdapterStoreError: no such version (the message lists the ones that exist).
        """
        if ref == "current":
            version = self.current(doc_key)
            if version is None:
                latest = self.latest(doc_key)
                if latest is not None:
                    raise AdapterStoreError(
                        f"document {doc_key!r} has no promoted adapter yet (its candidate {latest.name} was not "
                        f"promoted by the promotion gate; name it as {latest.name} to use it anyway)"
                    )
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
        """Make ``staging`` the next version of its document: a candidate, which only :meth:`promote` makes
        current.

        Writes ``metadata.json`` (with ``version`` and ``content_sha256`` filled in), fsyncs the whole directory,
        renames it to ``versions/vNNNN`` (N = highest existing + 1) and fsyncs ``versions/``; ``current`` is
        unchanged.

        With a ledger, N = the highest recorded + 1, and the rename happens inside the ledger's transaction
        (module docstring): a directory already at ``vNNNN`` is an orphan and is moved aside first; if the
        transaction fails the renamed directory is removed.

        Returns:
            the committed version.

        Raises:
            AdapterStoreError: ``staging`` holds no ``adapter_config.json`` (nothing was saved into it).
            OSError: the disk failed; nothing was committed.
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
        return AdapterVersion(staging.doc_key, number, target)

    def _install(self, staging: Staging, metadata: AdapterMetadata, number: int) -> Path:
        """Write ``metadata.json`` (with the version's number and its files' hashes), fsync, rename ``staging``
        to ``versions/vNNNN``, fsync; returns the path."""
        meta = {**metadata.to_dict(), "version": number, "content_sha256": adapter_hashes(staging.path)}
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
