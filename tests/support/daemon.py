"""Helpers for tests of the running daemon: an in-process service on a real Unix socket, block-log
writers, a client, and polling with a generous timeout (no timing claims)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from learnerd.analyzer.blocklog import event_line
from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import Config
from learnerd.daemon.service import Service, ServiceOptions
from learnerd.store.blocks import Cell
from learnerd.training.settings import TrainingSettings


@contextlib.contextmanager
def short_tmp_dir() -> Iterator[Path]:
    """A fresh directory directly under /tmp: pytest's tmp_path can make socket paths longer than the
    107 bytes a Unix socket address holds."""
    path = Path(tempfile.mkdtemp(prefix="ld-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


#: Three blocks ``{block_id: (description, command)}`` whose examples the daemon tests learn.
SAMPLE_BLOCKS = {
    "b-ls": ("List the files in a directory", "ls -la"),
    "b-du": ("Show how much disk space a folder uses", "du -sh ."),
    "b-pwd": ("Print the current working directory", "pwd"),
}


def daemon_config(root: Path, **overrides: Any) -> Config:
    """A config with its state in ``root/state`` and one log directory ``root/logs`` (created)."""
    (root / "logs").mkdir(exist_ok=True)
    cfg = Config(
        state_dir=root / "state",
        log_dirs=[root / "logs"],
        docs_dirs=[root / "docs"],
        analyzer=AnalyzerConfig(poll_interval_s=0.2),
        training=TrainingSettings(enabled=False),  # operating the daemon, not training adapters
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def block_lines(block_id: str, description: str, command: str, time: float = 1_700_000_000.0) -> str:
    """The two block-log events (context, executed) of one block whose example is (description, command)."""
    return event_line("context", block_id, time, cells=[Cell("markup", description)]) + event_line(
        "executed", block_id, time + 1, cell=Cell("code", command, "bash"), exit_code=0
    )


def append_blocks(log_file: Path, blocks: dict[str, tuple[str, str]]) -> None:
    """Append ``{block_id: (description, command)}`` to ``log_file`` (its directory made) in one write."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a", encoding="utf-8") as f:
        f.write("".join(block_lines(b, d, c) for b, (d, c) in blocks.items()))


def admin_session(socket_path: Path) -> aiohttp.ClientSession:
    """An aiohttp client of the admin socket; request paths like ``"/status"``."""
    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket_path)), base_url="http://learnerd")


@dataclass
class Running:
    daemon: Daemon
    service: Service
    stop: anyio.Event

    @property
    def socket(self) -> Path:
        return self.daemon.cfg.layout.socket_path

    def session(self) -> aiohttp.ClientSession:
        return admin_session(self.socket)


@contextlib.asynccontextmanager
async def running_service(cfg: Config, embedder: Any, options: ServiceOptions | None = None) -> AsyncIterator[Running]:
    """A :class:`Service` running ``Daemon(cfg, embedder=embedder)`` until the block exits (then it
    drains); entered once the service is ready (``READY=1``)."""
    daemon = Daemon(cfg, embedder=embedder)
    try:
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            service = Service(daemon, stop, options)
            await tg.start(service.run)
            yield Running(daemon, service, stop)
            stop.set()
    finally:
        daemon.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 120.0, what: str = "condition") -> None:
    """Poll ``check`` every 50 ms until it returns True; fail after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        while not await check():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"{what}: still not true after {timeout:g} s")


async def get_json(session: aiohttp.ClientSession, path: str) -> Any:
    async with session.get(path) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def post_json(session: aiohttp.ClientSession, path: str, body: Any = None) -> tuple[int, Any]:
    async with session.post(path, json=body) as response:
        return response.status, await response.json()
