"""Crash-safe file replacement: write a temp file beside the target, fsync it, rename it over the
target, fsync the directory. A reader sees the old bytes or the new bytes, never a mix, and after
a crash at any point the target holds one or the other (POSIX rename(2) is atomic within a file system).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or a new entry inside it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_synced(fd: int, data: bytes) -> None:
    """Append ``data`` to the file open on ``fd`` (opened with ``O_APPEND``), then fsync it: when this returns,
    ``data`` survives a crash or a power loss.

    Raises:
        OSError: the write or the fsync failed; the file is first cut back to its size before the call (as far
            as it can be), so no partial line is left in front of later appends.
    """
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


NEW_FILE_MODE = 0o600
"""The mode of a file learnerd creates (documents, exports, journals): its owner's only."""


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync the directory).

    Args:
        path: the target file; its directory must exist.
        data: the complete new content.
        mode: permission bits for the new file; by default those of the file it replaces, else 0o600 (a new file
            learnerd writes may hold what people ran: readable by its owner only).

    Raises:
        OSError: the directory is missing or not writable; the target is then untouched.
    """
    target = Path(path)
    tmp = _write_temp(target, data, mode)
    try:
        os.replace(tmp, target)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(target.parent)


def replace_if_unchanged(
    path: str | os.PathLike[str], data: bytes, expected: bytes | None, mode: int | None = None
) -> bool:
    """Compare-and-swap for files: replace ``path`` with ``data`` only if its content is still ``expected``.

    ``expected=None`` means "only if ``path`` does not exist": the new file is linked into place with
    link(2), which fails when the name exists, so creation has no race at all. Otherwise the content is
    compared after the new bytes are written and fsynced to a temp file, immediately before rename(2);
    rename cannot be made conditional, so a writer that does not take part (a person's editor) and saves
    in the microseconds between that comparison and the rename is overwritten. Callers that need more
    (learnerd's own writers) serialize among themselves with a lock.

    Returns:
        True if ``path`` now holds ``data``; False (nothing changed) if its content was not ``expected``.

    Raises:
        OSError: the directory is missing or not writable.
    """
    target = Path(path)
    tmp = _write_temp(target, data, mode)
    try:
        if expected is None:
            try:
                os.link(tmp, target)
            except FileExistsError:
                return False
        else:
            try:
                current = target.read_bytes()
            except FileNotFoundError:
                return False
            if current != expected:
                return False
            os.replace(tmp, target)
    finally:
        _unlink_quietly(tmp)
    fsync_dir(target.parent)
    return True


def _write_temp(target: Path, data: bytes, mode: int | None) -> str:
    """Write ``data`` to a fsynced temp file beside ``target``; its mode is ``mode``, else ``target``'s, else 0o600."""
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int | None = None) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text (no newline translation)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def write_cache_file(path: Path, data: bytes, event: str) -> None:
    """:func:`atomic_write_bytes` of ``data`` to ``path`` for a cache, which never fails its caller: the
    directory is created first (mode 0700); an ``OSError`` (no space, a read-only cache) is logged as a
    warning named ``event`` (with ``path`` and ``error``) and the write skipped."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
    except OSError as exc:
        log.warning(event, path=str(path), error=str(exc))


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every regular file under ``root``, then every directory bottom-up, ``root`` last.

    Used before renaming a freshly written directory into place (an adapter version, a built model),
    so that after the rename survives a power loss so does everything inside it.
    """
    top = Path(root)
    directories = [top]
    for path in sorted(top.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_dir():
            directories.append(path)
        elif path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(directory)


def publish_directory(staging: Path, target: Path, identity_file: str, identity: dict) -> None:
    """Write ``identity`` (JSON, sorted keys) into ``staging/identity_file``, fsync the tree and rename it
    to ``target`` atomically; when another process published ``target`` first (it holds ``identity_file``),
    keep theirs (built from the same input, it is the same). The caller removes ``staging`` if it remains.

    Raises:
        OSError: the rename failed and ``target`` holds no published directory.
    """
    import json

    (staging / identity_file).write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    fsync_tree(staging)
    try:
        os.rename(staging, target)
    except OSError:
        if not (target / identity_file).is_file():
            raise
    else:
        fsync_dir(target.parent)
