"""The admin socket's file: 0600 from its first moment, stale sockets replaced, live ones never taken."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest

from learnerd.api.unix_socket import SocketInUse, bind_admin_socket, remove_admin_socket
from learnerd.store.state_dir import UnsafeStateDir, secure_state_dir
from tests.support.daemon import short_tmp_dir


@pytest.fixture
def state():
    with short_tmp_dir() as root:
        path = root / "state"
        secure_state_dir(path)
        yield path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_bound_socket_is_0600_and_accepts(state: Path) -> None:
    admin = bind_admin_socket(state / "learnerd.sock")
    try:
        st = os.lstat(admin.path)
        assert stat.S_ISSOCK(st.st_mode) and _mode(admin.path) == 0o600
        assert sorted(os.listdir(state)) == ["learnerd.sock"], "no temporary name left behind"
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(admin.path))  # renamed after bind, still reachable
    finally:
        remove_admin_socket(admin)
    assert not admin.path.exists()


def test_mode_is_0600_at_every_moment_even_under_a_permissive_umask(state: Path) -> None:
    """A thread lstat()s the path as fast as it can while sockets are bound and removed over and over."""
    path = state / "learnerd.sock"
    seen: set[int] = set()
    stop = threading.Event()

    observed = [0]

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                seen.add(os.lstat(path).st_mode)
                observed[0] += 1

    old_umask = os.umask(0)  # bind(2) would create the file 0777 under this umask
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so the watcher runs while a socket exists
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(20_000):
            remove_admin_socket(bind_admin_socket(path))
            if i >= 200 and observed[0] >= 50:
                break
    finally:
        stop.set()
        watcher.join()
        sys.setswitchinterval(old_interval)
        os.umask(old_umask)
    assert observed[0] > 0, "the watcher never saw a socket: the test proved nothing"
    assert seen == {stat.S_IFSOCK | 0o600}


def test_a_stale_socket_is_replaced(state: Path) -> None:
    path = state / "learnerd.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # bound but never listening, then closed: what a killed daemon leaves
    dead.close()
    assert path.exists()
    admin = bind_admin_socket(path)
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
    finally:
        remove_admin_socket(admin)


def test_a_live_socket_is_never_taken_over(state: Path) -> None:
    path = state / "learnerd.sock"
    first = bind_admin_socket(path)
    try:
        with pytest.raises(SocketInUse, match="served by another live process"):
            bind_admin_socket(path)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))  # the first one still serves
    finally:
        remove_admin_socket(first)


def test_something_else_at_the_path_is_left_alone(state: Path) -> None:
    path = state / "learnerd.sock"
    path.write_text("not a socket")
    with pytest.raises(SocketInUse, match="not a socket"):
        bind_admin_socket(path)
    assert path.read_text() == "not a socket"


def test_removal_spares_a_newer_socket_at_the_same_path(state: Path) -> None:
    path = state / "learnerd.sock"
    old = bind_admin_socket(path)
    os.unlink(path)
    new = bind_admin_socket(path)
    remove_admin_socket(old)
    assert path.exists(), "the old daemon's clean-up must not delete the new daemon's socket"
    remove_admin_socket(new)


def test_a_too_long_path_is_refused_clearly(state: Path) -> None:
    deep = state / ("d" * 100)
    deep.mkdir()
    with pytest.raises(SocketInUse, match="longer than 107 bytes"):
        bind_admin_socket(deep / "learnerd.sock")


def test_state_dir_is_tightened_to_0700_and_must_be_ours(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    secure_state_dir(loose)
    assert _mode(loose) == 0o700
    fresh = tmp_path / "a" / "fresh"
    secure_state_dir(fresh)
    assert _mode(fresh) == 0o700
    link = tmp_path / "link"
    link.symlink_to(loose)
    with pytest.raises(UnsafeStateDir, match="not a directory"):
        secure_state_dir(link)
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(UnsafeStateDir, match="belongs to uid 65534"):
            secure_state_dir(theirs)
