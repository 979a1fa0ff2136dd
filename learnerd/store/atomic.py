"""Crash-safe file replacement: write a temp file beside the target, fsync it, rename it over the
target, fsync the directory. A reader sees the old bytes or the new bytes, never a mix, and after
a crash at any point the target holds one or the other (POSIX rename(2) is atomic within a file system).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or a new entry inside it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync the directory).

    Args:
        path: the target file; its directory must exist.
        data: the complete new content.
        mode: permission bits for the new file; by default those of the file it replaces, else 0o644.

    Raises:
        OSError: the directory is missing or not writable; the target is then untouched.
    """
    target = Path(path)
    directory = target.parent
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int | None = None) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text (no newline translation)."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


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
