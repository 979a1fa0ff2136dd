"""The state directory is secured before anything is created in it: 0700, ours, and holding only our files.

:func:`secure_state_dir` is the first thing every command that uses a state directory does (the state
lock takes it before creating its lock file; the daemon before opening its database). It

1. creates the directory with mode 0700 if it is missing, else checks that it is a real directory (not a
   symlink) owned by this process's effective user, and tightens its mode to 0700;
2. walks everything already in it (without following symlinks) and refuses the directory if any entry
   belongs to another user: a file planted while the directory was open to others (a probe journal, a
   database, an adapter) is never trusted, however it got there.

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
