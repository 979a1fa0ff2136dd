"""Versioned exports of a document's adapters for other servers: one entry per version, a stable alias.

Layout of an export directory (``<name>``: the document's served-model name, its file name without
``.dlm``; ``<suffix>``: ``""`` for vLLM's adapter directories, ``".gguf"`` for llama.cpp's LoRA files)::

    <dir>/
        <name>@v0003<suffix>                   a version: a directory or a file, written whole
        <name>@v0004<suffix>
        <name><suffix> -> <name>@v0004<suffix>  the alias: a relative symbolic link, replaced by rename(2)
        .staging-<name>@v0005-k3j2/            a version (or the new alias) being written
        .dropped-<name>@v0001-x9q1/            a version being removed

The formats are :mod:`learnerd.store.vllm_layout` (vLLM's LoRA resolver) and :mod:`learnerd.ml.gguf_lora`
(llama.cpp's GGUF LoRA). Crash safety: a version is written inside a ``.staging-*`` directory, fsynced, and
renamed to its final name (rename(2) is atomic), so a version exists only complete; the alias is a new
symbolic link renamed over the old one, so it names the old or the new version, never nothing; a dropped
version is renamed into a ``.dropped-*`` directory before it is deleted. A crash at any point leaves the
previous export intact, and the next publish of ``<name>`` removes its leftovers.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from learnerd.store.atomic import fsync_dir, fsync_tree

_STAGING = ".staging-"
_DROPPED = ".dropped-"


class ExportRefused(Exception):
    """An adapter the target server cannot load, or a name the layout cannot hold; nothing was written."""


@dataclass(frozen=True)
class Published:
    """What :func:`publish` did: ``name`` the entry now aliased (``<name>@vNNNN<suffix>``), ``written``
    whether it was written now (False: it was already there), ``kept`` the entries left (oldest first),
    ``dropped`` the ones removed."""

    name: str
    written: bool
    kept: tuple[str, ...]
    dropped: tuple[str, ...]


def versioned_name(name: str, number: int, suffix: str = "") -> str:
    """``<name>@vNNNN<suffix>``: the entry of a version, e.g. ``learned@v0002`` (also vLLM's adapter name)."""
    return f"{name}@v{number:04d}{suffix}"


def exported_versions(directory: Path, name: str, suffix: str = "") -> dict[int, str]:
    """Version number → entry name of every ``<name>@vNNNN<suffix>`` in ``directory`` (not symbolic links)."""
    pattern = re.compile(re.escape(name) + r"@v(\d{4,})" + re.escape(suffix))
    found = {}
    for entry in directory.iterdir() if directory.is_dir() else ():
        match = pattern.fullmatch(entry.name)
        if match and not entry.is_symlink():
            found[int(match.group(1))] = entry.name
    return dict(sorted(found.items()))


def publish(
    directory: Path, name: str, number: int, keep: int, write: Callable[[Path], None], suffix: str = ""
) -> Published:
    """Make ``<directory>/<name>@vNNNN<suffix>`` (with ``write(path)``, unless it exists), point the alias
    ``<directory>/<name><suffix>`` at it, and keep ``keep`` versions of ``name`` (this one and the newest
    others); idempotent.

    Args:
        directory: the export directory (created when missing).
        name: the document's served-model name (not empty, no ``/`` or ``@``, not starting with ``.``).
        number: the version's number.
        keep: how many versions of ``name`` to keep (at least 1).
        write: creates the version's entry (a file or a directory) at the path it is given; it may raise
            :class:`ExportRefused` or ``OSError`` (nothing is then left behind).
        suffix: the entries' and alias's suffix (``".gguf"``).

    Raises:
        ExportRefused: a bad name, a refusal of ``write``, or ``<directory>/<name><suffix>`` is not a symbolic
            link (something else is there: left alone).
        OSError: the directory cannot be written; what was exported before is intact.
    """
    if not name or "/" in name or "@" in name or name.startswith("."):
        raise ExportRefused(f"{name!r} cannot name an exported adapter (no '/', '@' or leading '.')")
    alias = directory / f"{name}{suffix}"
    if os.path.lexists(alias) and not alias.is_symlink():
        raise ExportRefused(f"{alias} exists and is not the alias learnerd writes (a symbolic link); left alone")
    directory.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(directory, name)
    target = versioned_name(name, number, suffix)
    written = not os.path.lexists(directory / target)
    if written:
        staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{target}-", dir=directory))
        try:
            write(staging / target)
            fsync_tree(staging)
            os.rename(staging / target, directory / target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        fsync_dir(directory)
    if not alias.is_symlink() or os.readlink(alias) != target:
        link = directory / f"{_STAGING}{name}@alias-{os.getpid()}"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        os.replace(link, alias)
        fsync_dir(directory)
    versions = exported_versions(directory, name, suffix)
    others = [n for n in versions if n != number]
    kept_numbers = sorted([number, *(others[-(keep - 1) :] if keep > 1 else [])])
    dropped = [versions[n] for n in others if n not in kept_numbers]
    for old in dropped:
        aside = Path(tempfile.mkdtemp(prefix=f"{_DROPPED}{old}-", dir=directory))
        os.replace(directory / old, aside / old)
        fsync_dir(directory)
        shutil.rmtree(aside, ignore_errors=True)
    return Published(target, written, tuple(versions[n] for n in kept_numbers), tuple(dropped))


def _remove_leftovers(directory: Path, name: str) -> None:
    """Staging and dropped entries of ``name`` left by a crash (a name is exported by one worker at a time)."""
    for prefix in (_STAGING, _DROPPED):
        for entry in directory.glob(f"{prefix}{glob.escape(name)}@*"):
            if entry.is_symlink() or entry.is_file():
                entry.unlink(missing_ok=True)
            else:
                shutil.rmtree(entry, ignore_errors=True)


def place_copy(source: Path, target: Path) -> bool:
    """Copy ``source`` to ``target`` atomically (temp file beside it, fsync, rename, fsync the directory) unless
    ``target`` already has ``source``'s size; returns whether it copied. Raises ``OSError``."""
    if target.is_file() and not target.is_symlink() and target.stat().st_size == source.stat().st_size:
        return False
    staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{target.name}@", dir=target.parent))
    try:
        shutil.copyfile(source, staging / target.name)
        fsync_tree(staging)
        os.replace(staging / target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(target.parent)
    return True
