"""The admin socket's file: a Unix stream socket in the state directory, mode 0600 from the moment it exists.

**No chmod-after-bind race.** ``bind(2)`` creates the socket file with mode ``0777 & ~umask``; a
``chmod`` after it leaves a window in which the file has that mode. So the socket is bound under a
temporary name in the state directory, ``chmod``-ed to 0600 there, and then ``rename``-d over the
final name: ``rename(2)`` is atomic, so the final path only ever names a 0600 socket, and the
temporary name lives in a directory that is 0700 and ours, where nobody else can reach it. Not
chosen: setting a restrictive umask around ``bind`` (the umask is process-wide, and the embedder's
loader thread and SQLite create files at the same moments), and ``fchmod`` on the socket's
descriptor (on Linux it does not change the file). A listening socket keeps working when its file
is renamed: clients find it by the inode the name points to.

**Stale sockets.** :func:`bind_admin_socket` is called while holding the state directory's lock
(:mod:`learnerd.daemon.statelock`), so no other learnerd is serving on this directory: a socket file
that is still there was left by a daemon that died (``kill -9``, a power cut). It is probed with
``connect(2)`` all the same: refused → stale → replaced; accepted → something else serves there
(a learnerd without the lock, another program) → :class:`SocketInUse`, and the file is left alone.
So a live daemon's socket is never stolen, and the lock and the socket agree.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

#: The longest path ``sun_path`` holds on Linux (108 bytes with the terminating NUL).
MAX_SOCKET_PATH_BYTES = 107


class SocketInUse(RuntimeError):
    """The admin socket's path is served by a live process, or is something other than a socket."""


class UnsafeStateDir(RuntimeError):
    """The state directory is not a directory owned by this user."""


@dataclass
class AdminSocket:
    """A bound, listening admin socket; ``inode`` is its file's, so :func:`remove_admin_socket`
    never deletes a file some later daemon put at the same path."""

    sock: socket.socket
    path: Path
    inode: int


def secure_state_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) or make sure it is a directory owned by us, and set it to 0700.

    Raises:
        UnsafeStateDir: ``path`` is a symlink, not a directory, or owned by another user.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeStateDir(f"state directory {path} is not a directory (a symlink is not accepted either)")
    if st.st_uid != os.getuid():
        raise UnsafeStateDir(f"state directory {path} belongs to uid {st.st_uid}, not to this user ({os.getuid()})")
    if stat.S_IMODE(st.st_mode) != 0o700:
        log.warning("state directory was not 0700; tightened", dir=str(path), mode=oct(stat.S_IMODE(st.st_mode)))
        os.chmod(path, 0o700)


def _check_length(path: Path) -> None:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise SocketInUse(
            f"socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes, the limit of a Unix socket "
            "address; use a shorter state directory"
        )


def _probe_existing(path: Path) -> None:
    """Remove a stale socket at ``path``; raise :class:`SocketInUse` for a live one or a non-socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; move it away")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(os.fspath(path))
    except ConnectionRefusedError:
        log.warning("removing a stale admin socket left by a daemon that died", socket=str(path))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketInUse(f"cannot check the existing socket {path}: {exc}") from exc
    finally:
        probe.close()
    raise SocketInUse(f"{path} is served by another live process; not taking it over")


def bind_admin_socket(path: Path, backlog: int = 64) -> AdminSocket:
    """Bind and listen on ``path`` (mode 0600 from its first moment); replace a stale socket file.

    Call with the state directory secured (:func:`secure_state_dir`) and its lock held.

    Returns:
        the listening, non-blocking socket.

    Raises:
        SocketInUse: ``path`` is served by a live process, is not a socket, or is too long.
        OSError: binding failed.
    """
    temporary = path.with_name(f".{path.name}.new")
    _check_length(temporary)
    _probe_existing(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # left by a daemon killed between its bind and its rename
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(temporary))
        os.chmod(temporary, 0o600)
        os.rename(temporary, path)
        sock.listen(backlog)
        sock.setblocking(False)
        inode = os.lstat(path).st_ino
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return AdminSocket(sock, path, inode)


def remove_admin_socket(admin: AdminSocket) -> None:
    """Close the socket and delete its file, if the path still names this socket's file."""
    admin.sock.close()
    try:
        if os.lstat(admin.path).st_ino == admin.inode:
            os.unlink(admin.path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("could not remove the admin socket", socket=str(admin.path), error=str(exc))
