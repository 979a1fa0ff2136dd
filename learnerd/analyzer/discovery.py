"""Which files are log files: every regular file under a log directory, recursively, whose name
ends in a suffix of a framing (:data:`learnerd.analyzer.reader.JSON_LINES`: ``.jsonl``, ``.json`` or
``.log``; :data:`~learnerd.analyzer.reader.SQLITE_ROWS`: ``.db``; any case) — and, by content,
which of them is no log after all (a pretty-printed JSON document: :func:`is_json_document`).

Left out: anything whose name, or the name of a directory between it and the log directory,
starts with ``.`` (dotfiles, editors' and writers' hidden temp files, ``.git``); names ending in
``~``; symbolic links (a link and its target would be read twice); rotated names that no longer
end in one of the suffixes (``app.log.1``, ``app.log-20240501``, ``app.log.2.gz``) — a file
rotated away under such a name is finished through the analyzer's open handle or found by its
inode, never re-read from the start.

Depth: only files at most :data:`MAX_DEPTH` directories below a log directory count (a file directly
in it is at depth 0). The walk is iterative, so a directory tree of any depth (a hostile 1,000-level
nest) never exhausts Python's stack; it simply is not descended past that depth.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from learnerd.analyzer.reader import framing_of

MAX_DEPTH = 32
"""Directories below a log directory that are still searched for log files; deeper ones are not."""


def is_log_name(name: str) -> bool:
    """Whether a file name (no directory) counts as a log file."""
    return not name.startswith(".") and not name.endswith("~") and framing_of(name) is not None


def is_log_path(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is a log file's path under one of ``roots`` by name alone (no file-system access).

    ``roots`` must be absolute, normalised directories; a dot-directory above a root (``~/.foyle/logs``)
    does not matter, one below it does.
    """
    for root in roots:
        rel = os.path.relpath(path, root)
        if rel.startswith(os.pardir + os.sep) or rel in (os.curdir, os.pardir):
            continue
        parts = rel.split(os.sep)
        if len(parts) - 1 <= MAX_DEPTH and all(not p.startswith(".") for p in parts[:-1]) and is_log_name(parts[-1]):
            return True
    return False


def discover(roots: Iterable[str]) -> dict[str, int]:
    """Every log file under the existing ``roots``, at most :data:`MAX_DEPTH` directories down:
    path → inode, in path order.

    Directories that do not exist (yet) or cannot be listed are passed over. Iterative (an explicit
    stack), so the depth of a tree never matters to the call stack.
    """
    found: dict[str, int] = {}
    for root in roots:
        stack = [(root, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = list(it)
            except OSError:  # missing, not a directory, unreadable, name too long: the next scan tries again
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH:
                            stack.append((entry.path, depth + 1))
                    elif entry.is_file(follow_symlinks=False) and is_log_name(entry.name):
                        found[entry.path] = entry.inode()
                except OSError:  # vanished while listing
                    continue
    return dict(sorted(found.items()))


def find_by_inode(directory: str, inode: int) -> str | None:
    """The path of a regular file with ``inode`` directly in ``directory`` (any name), or None."""
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.inode() == inode and entry.is_file(follow_symlinks=False):
                    return entry.path
    except OSError:
        return None
    return None


JSON_DOCUMENT_REASON = (
    "not a block log: the file is one JSON document (e.g. pretty-printed), not one JSON object per line"
)
"""The reason given for each line of a file :func:`is_json_document` finds (counted as foreign lines)."""


def is_json_document(fd: int, size: int, max_bytes: int) -> bool:
    """Whether the open file ``fd`` (``size`` bytes) is one JSON document spread over lines (a
    pretty-printed ``.json``), not a log: its first line is not JSON by itself, and the whole file (at
    most ``max_bytes``; a larger file is taken for a log) is.

    Raises:
        OSError: reading failed.
    """
    if size == 0 or size > max_bytes:
        return False
    head = os.pread(fd, min(size, 64 * 1024), 0)
    first = head.split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf")
    if b"\n" not in head.rstrip() or not first.strip():
        return False
    try:
        json.loads(first)
        return False  # line 1 is JSON by itself: a JSON-lines log
    except Exception:  # ValueError, RecursionError: not by itself
        pass
    try:
        json.loads(os.pread(fd, size, 0).removeprefix(b"\xef\xbb\xbf"))
    except Exception:
        return False
    return True
