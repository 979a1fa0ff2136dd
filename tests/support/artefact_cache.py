"""The suite's once-per-machine cache of derived artefacts: what tests build from fixed inputs and only read
afterwards (the built-in tiny models, SmolLM2 converted from its GGUF file and as a float32 GGUF, trained
adapters, the released dlm's virtualenv).

Where: ``$LEARNERD_TEST_CACHE``, else ``$XDG_CACHE_HOME/learnerd-tests``, else ``~/.cache/learnerd-tests``.
Clear it with ``rm -rf ~/.cache/learnerd-tests`` (not while tests run).

An entry is the directory ``<root>/<name>-<16 hex of its key>``, where the key is the SHA-256 of everything
that decides its content (:func:`content_key`: input files' bytes, the code that builds it, library versions).
It is built once, in place, under a file lock (``filelock``) beside it, and :data:`COMPLETE` is written into it
last: the pytest-xdist workers of one run and every later run on the machine share it, the first builds it
while the others wait, and nobody uses half an entry (paths recorded while it was built stay true). Entries are
read only; a test that changes one copies it first. An entry unused (its lock file untouched) for
:data:`MAX_AGE_DAYS` is removed when another entry of the same name is built, so code changes do not fill the
disk with stale versions.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

from filelock import FileLock, Timeout

from tests.conftest import REPO_ROOT

MAX_AGE_DAYS = 14
COMPLETE = ".complete"
"""The file written last into an entry: an entry without it is half-built (a build was killed) and built again."""


def cache_root() -> Path:
    """The cache's directory (the module docstring), created on demand."""
    override = os.environ.get("LEARNERD_TEST_CACHE")
    if override:
        root = Path(override)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "learnerd-tests"
    root.mkdir(parents=True, exist_ok=True)
    return root


def content_key(*parts: str | bytes | Path) -> str:
    """SHA-256 hex of ``parts`` in order: a string or bytes as given, a file as its bytes, a directory as every
    file under it (relative path and bytes, sorted; ``__pycache__`` skipped). A missing path counts as absent."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = sorted(p for p in part.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            for file in files if part.is_dir() else [part] if part.is_file() else []:
                digest.update(f"\0file\0{file.relative_to(part.parent)}\0".encode())
                digest.update(file.read_bytes())
            digest.update(b"\0end\0")
        else:
            digest.update(b"\0part\0" + (part.encode() if isinstance(part, str) else part))
    return digest.hexdigest()


def learnerd_code() -> Path:
    """learnerd's package directory: the key part of an artefact that learnerd's behaviour decides."""
    return REPO_ROOT / "learnerd"


def versions(*distributions: str) -> str:
    """``name==version`` of each installed distribution (``absent`` when not installed), for a key."""
    found = []
    for name in distributions:
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} absent")
    return " ".join(found)


def cached(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The entry ``<root>/<name>-<key[:16]>``, built first by ``build(entry)`` when it is not complete (under the
    entry's lock; a build that raises leaves nothing, and the next caller builds again)."""
    root = cache_root()
    entry = root / f"{name}-{key[:16]}"
    lock = root / f"{entry.name}.lock"
    with FileLock(lock):
        lock.touch()  # the entry's last use, for the pruning of stale entries
        if not (entry / COMPLETE).is_file():
            _prune(root, name)
            shutil.rmtree(entry, ignore_errors=True)  # what a build killed half-way left
            entry.mkdir()
            try:
                with _no_user_config():
                    build(entry)
            except BaseException:
                shutil.rmtree(entry, ignore_errors=True)
                raise
            (entry / COMPLETE).touch()
    return entry


@contextlib.contextmanager
def _no_user_config() -> Iterator[None]:
    """A build (and every ``learnerd`` process it starts) sees an empty ``$XDG_CONFIG_HOME`` and no
    ``$LEARNERD_CONFIG``: no config or token file of whoever runs the tests goes into a shared entry."""
    saved = {name: os.environ.get(name) for name in ("XDG_CONFIG_HOME", "LEARNERD_CONFIG")}
    with tempfile.TemporaryDirectory(prefix="learnerd-tests-config-") as empty:
        os.environ["XDG_CONFIG_HOME"] = empty
        os.environ.pop("LEARNERD_CONFIG", None)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _prune(root: Path, name: str) -> None:
    """Remove the entries of ``name`` whose lock file is older than :data:`MAX_AGE_DAYS` (their lock held)."""
    oldest = time.time() - MAX_AGE_DAYS * 86400
    for lock in root.glob(f"{name}-" + "?" * 16 + ".lock"):
        if lock.stat().st_mtime < oldest:
            with contextlib.suppress(Timeout), FileLock(lock, timeout=0):  # in use: kept
                shutil.rmtree(root / lock.stem, ignore_errors=True)
