"""A real PostgreSQL server for tests: ``initdb`` into a fresh directory under /tmp, ``pg_ctl start`` with
the server listening only on a Unix socket in that directory (no TCP port at all), and one fresh
database per test.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as an unprivileged
user (``nobody``, or ``$LEARNERD_TEST_PG_USER``): the directory is chowned to it and the binaries are
started with ``subprocess``'s ``user=``. Authentication is ``trust`` over the socket, which only this
machine's processes can reach (the directory is the server's own).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "learnerd"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$LEARNERD_PG_BINDIR``, else ``pg_config
    --bindir``, else the newest ``/usr/lib/postgresql/*/bin`` (Debian's layout), else ``$PATH``."""
    candidates: list[str] = []
    if os.environ.get("LEARNERD_PG_BINDIR"):
        candidates.append(os.environ["LEARNERD_PG_BINDIR"])
    if shutil.which("pg_config"):
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    if shutil.which("initdb"):
        candidates.append(str(Path(shutil.which("initdb")).parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    return None


@dataclass
class PostgresServer:
    """A running server: ``root`` holds ``data/``, the socket and ``server.log``."""

    bindir: Path
    root: Path
    user: str | None  # the OS user the server runs as when the tests run as root
    settings: dict[str, str]  # extra ``-c name=value`` server settings

    _counter = itertools.count()

    @property
    def socket_dir(self) -> Path:
        return self.root

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of ``database`` over the Unix socket."""
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            check=True,
            user=self.user,
            cwd=self.root,
        )

    def start(self) -> None:
        """``initdb`` (trust authentication, UTF-8) and ``pg_ctl start -w``. Raises CalledProcessError."""
        self._run("initdb", "-D", str(self.root / "data"), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync")
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        options = f"-k {self.socket_dir} -c listen_addresses='' -c max_connections=200"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        data, log = str(self.root / "data"), str(self.root / "server.log")
        self._run("pg_ctl", "start", "-w", "-D", data, "-l", log, "-o", options)

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.root / "data"))

    def restart(self) -> None:
        """Stop (immediate: like a crash) and start again; clients must reconnect."""
        self.stop()
        self._pg_ctl_start()

    def resume(self) -> None:
        """Start the server again after :meth:`stop`."""
        self._pg_ctl_start()

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"test_{os.getpid()}_{next(self._counter)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.split("/")[-1].split("?")[0]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    name = os.environ.get("LEARNERD_TEST_PG_USER", "nobody")
    pwd.getpwnam(name)  # KeyError when the user does not exist
    return name


#: The tests' server settings: fsync off, since the tests kill learnerd, never the machine.
TEST_SETTINGS = {"fsync": "off"}


@contextlib.contextmanager
def postgres_server(settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """Start a throw-away server (see the module docstring) and stop it and delete its files on exit.
    ``settings``: server settings (``-c name=value``), :data:`TEST_SETTINGS` by default.

    Raises:
        FileNotFoundError: no PostgreSQL binaries (the fixture turns this into a skip).
    """
    bindir = find_bindir()
    if bindir is None:
        raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl) found")
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="ld-pg-", dir="/tmp"))  # short: a socket path holds 107 bytes
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    os.chmod(root, 0o755)
    server = PostgresServer(bindir, root, user, TEST_SETTINGS if settings is None else settings)
    try:
        try:
            server.start()
        except subprocess.CalledProcessError as exc:
            log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
            raise RuntimeError(f"PostgreSQL failed to start: {exc.stderr}\n{log[-2000:]}") from exc
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
