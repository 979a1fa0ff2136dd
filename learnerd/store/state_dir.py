"""The state directory is secured before anything is created in it: 0700, ours, and holding only our files.

:func:`secure_state_dir` is the first thing every command that uses a state directory does (the state
lock takes it before creating its lock file; the daemon before opening its database). It

1. creates the directory with mode 0700 if it is missing, else checks that it is a real directory (not a
   symlink) owned by this process's effective user, and tightens its mode to 0700;
2. walks everything already in it (without following symlinks) and refuses the directory if any entry
   belongs to another user: a file planted while the directory was open to others (a probe journal, a
   database, an adapter) is never trusted, however it got there;
3. takes the group's and others' permission bits off every entry under it (files 0600, directories 0700,
   the owner's bits kept): what an older learnerd, or a looser umask, left readable (:func:`tighten_modes`).
   learnerd's commands create everything private from then on (their umask is 077: :mod:`learnerd.cmd.main`).

Once the directory is 0700 and ours, no other user (root aside) can add to it, so the walk at start-up
covers every file the daemon will ever open there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

#: Foreign entries named in the refusal at most.
MAX_NAMED = 5


class UnsafeStateDir(RuntimeError):
    """The state directory is not a directory owned by this user, or holds another user's files."""


def secure_state_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) or check it is a directory owned by us holding only our files; set it to 0700.

    Raises:
        UnsafeStateDir: ``path`` is a symlink, not a directory, owned by another user, or holds an entry
            (at any depth) owned by another user; nothing is created or changed then.
        OSError: ``path`` cannot be created or read.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeStateDir(f"state directory {path} is not a directory (a symlink is not accepted either)")
    if st.st_uid != me:
        raise UnsafeStateDir(f"state directory {path} belongs to uid {st.st_uid}, not to this user ({me})")
    if stat.S_IMODE(st.st_mode) != 0o700:
        log.warning("state directory was not 0700; tightened", dir=str(path), mode=oct(stat.S_IMODE(st.st_mode)))
        os.chmod(path, 0o700)
    foreign = foreign_entries(path, me)
    if foreign:
        named = ", ".join(f"{p} (uid {uid})" for p, uid in foreign[:MAX_NAMED])
        more = f" and {len(foreign) - MAX_NAMED} more" if len(foreign) > MAX_NAMED else ""
        raise UnsafeStateDir(
            f"state directory {path} holds files of another user, which learnerd does not trust: {named}{more}; "
            "remove them (or give them to this user) and start again"
        )
    loosened = tighten_modes(path)
    if loosened:
        log.warning("state directory held entries others could read; made them private", dir=str(path), n=loosened)


def tighten_modes(root: Path) -> int:
    """Take the group's and others' bits off every entry under ``root`` (any depth; symbolic links neither
    followed nor changed); returns how many entries changed. Raises ``OSError``."""
    changed = 0
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            entry = os.path.join(directory, name)
            st = os.lstat(entry)
            mode = stat.S_IMODE(st.st_mode)
            if mode & 0o077 and not stat.S_ISLNK(st.st_mode):
                os.chmod(entry, mode & 0o700)
                changed += 1
    return changed


def foreign_entries(root: Path, uid: int) -> list[tuple[Path, int]]:
    """Every entry under ``root`` (any depth, symlinks not followed) not owned by ``uid``, with its owner;
    a foreign directory is listed and, when readable, searched too."""
    foreign: list[tuple[Path, int]] = []
    pending = [(root, True)]
    while pending:
        directory, ours = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            if ours:
                raise
            continue  # another user's unreadable directory: already named
        for entry in entries:
            owner = entry.stat(follow_symlinks=False).st_uid
            if owner != uid:
                foreign.append((Path(entry.path), owner))
            if entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), owner == uid))
    return sorted(foreign)
