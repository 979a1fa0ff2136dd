"""Hostile or careless configuration (issue 14, cases 3, 4, 11, 12): a reload never ends the daemon and
keeps the running config; start-up refuses what it cannot use with one clear line and a non-zero exit,
never a traceback, never a hang."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from learnerd.cmd.main import main
from learnerd.daemon.config import load_config
from learnerd.daemon.controllers import CONTROLLERS
from learnerd.daemon.service import ServiceOptions
from learnerd.sections import ConfigError
from tests.conftest import cli_env, learnerd_command
from tests.support.daemon import daemon_config, running_service
from tests.support.daemon_process import CONFIG, daemon_process, wait_until

pytestmark = pytest.mark.usefixtures("restore_log_level")

VALID = 'state_dir = "state"\nlog_dirs = ["logs"]\n\n[training]\nenabled = false\n'


def run_once(capsys, config: Path, *extra: str) -> tuple[int, str]:
    """``learnerd run --once --config CONFIG`` in this process; (exit status, stderr)."""
    capsys.readouterr()
    code = main(["run", "--once", "--config", str(config), *extra])
    return code, capsys.readouterr().err


def assert_one_clear_line(err: str, *words: str) -> None:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    for word in words:
        assert word in errors[0], (word, errors[0])


# -------------------------------------------------------------------------- values (cases 4 and 11)


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[controllers.examples]\ntimeout_s = nan", "controllers.examples.timeout_s"),
        ("[workqueue]\nqps = nan", "workqueue.qps"),
        ("[workqueue]\nmax_delay_s = inf", "workqueue.max_delay_s"),
        ("[shutdown]\ndrain_timeout_s = inf", "shutdown.drain_timeout_s"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_file_and_key(tmp_path: Path, table: str, key: str):
    path = tmp_path / "learnerd.toml"
    path.write_text(f"{VALID}\n{table}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: {key} must be a finite number, not {float(table.split('= ')[1])!r}"


def test_a_typo_in_a_controller_table_is_refused_naming_the_controllers(short_root: Path, capsys):
    config = short_root / "learnerd.toml"
    config.write_text(f"{VALID}\n[controllers.examplez]\nworkers = 1\n")
    code, err = run_once(capsys, config)
    assert code == 1
    names = ", ".join(spec.name for spec in CONTROLLERS)
    assert_one_clear_line(err, str(config), "[controllers.examplez]", names)


# -------------------------------------------------------------------------- start-up (case 11)


@pytest.mark.parametrize("key", ["state_dir", "docs_dirs", "log_dirs"])
def test_a_file_where_a_directory_belongs_is_refused(short_root: Path, capsys, key: str):
    (short_root / "a-file").write_text("not a directory\n")
    value = '"a-file"' if key == "state_dir" else '["a-file"]'
    settings = {"state_dir": '"state"', "log_dirs": '["logs"]', "docs_dirs": '["docs"]', key: value}
    config = short_root / "learnerd.toml"
    config.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()) + "[training]\nenabled = false\n")
    code, err = run_once(capsys, config)
    assert code == 1
    index = "" if key == "state_dir" else "[0]"
    assert_one_clear_line(err, str(config), f"{key}{index} {short_root / 'a-file'} is not a directory")
    assert not (short_root / "state" / "learnerd.db").exists(), "refused before anything was written"


def test_a_directory_as_the_config_path_is_refused(short_root: Path, capsys):
    (short_root / "conf.d").mkdir()
    code, err = run_once(capsys, short_root / "conf.d")
    assert code == 1
    assert_one_clear_line(err, f"config file {short_root / 'conf.d'} is a directory")


def test_a_fifo_as_the_config_is_refused_without_opening_it(short_root: Path):
    fifo = short_root / "learnerd.toml"
    os.mkfifo(fifo)
    try:  # before the fix, start-up blocked on open() until a writer came: the timeout stops that run
        done = subprocess.run(
            learnerd_command("run", "--once", "--config", str(fifo)),
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("start-up hung on a FIFO as the config file")
    assert done.returncode == 1
    assert_one_clear_line(done.stderr, f"config file {fifo} is not a regular file")


def test_a_corrupt_database_is_refused_with_one_line(short_root: Path, capsys):
    config = short_root / "learnerd.toml"
    config.write_text(VALID)
    (short_root / "state").mkdir(mode=0o700)
    (short_root / "state" / "learnerd.db").write_bytes(b"this is not an SQLite database\n" * 200)
    code, err = run_once(capsys, config)
    assert code == 1
    assert_one_clear_line(err, str(short_root / "state" / "learnerd.db"), "cannot use the database")


# -------------------------------------------------------------------------- the probe token (case 12)


@pytest.mark.parametrize("token", ["x", "fifteen-chars!!"])
def test_a_probe_token_shorter_than_16_characters_is_refused(short_root: Path, capsys, monkeypatch, token: str):
    config = short_root / "learnerd.toml"
    config.write_text('state_dir = "state"\nlog_dirs = ["logs"]\n')
    monkeypatch.setenv("LEARNERD_PROBE_TOKEN", token)
    code, err = run_once(capsys, config, "--listen-rpc", "127.0.0.1:0")
    assert code == 1
    assert_one_clear_line(err, "$LEARNERD_PROBE_TOKEN must be at least 16 characters long")


# -------------------------------------------------------------------------- reload (cases 3 and 4)


class _Unblock:
    """Opens ``fifo`` for writing after ``delay`` seconds, so a reader blocked on it gets EOF (a test of code
    that opens the FIFO ends instead of hanging)."""

    def __init__(self, fifo: Path, delay: float = 10.0) -> None:
        self.timer = threading.Timer(delay, self._open, args=(fifo,))

    @staticmethod
    def _open(fifo: Path) -> None:
        with contextlib.suppress(OSError):  # nobody was reading: nothing to unblock
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    def __enter__(self) -> None:
        self.timer.start()

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()


def _make_hostile(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        texts = {"nan": "[workqueue]\nqps = nan\n", "typo": "[controllers.examplez]\n", "toml": "qps =\n"}
        path.write_text(texts[kind])


@pytest.mark.anyio
async def test_reload_keeps_the_running_config_whatever_the_file_became(short_root: Path, minilm):
    path = short_root / "learnerd.toml"
    path.write_text("")
    cfg = daemon_config(short_root)
    unexpected: list[Exception] = []

    def reload_config():
        if unexpected:
            raise unexpected.pop()
        return load_config(path)

    options = ServiceOptions(reload_config=reload_config)
    async with running_service(cfg, minilm, options) as running:
        limiter = running.daemon.queues["examples"].rate_limiter
        for kind in ("directory", "fifo", "nan", "typo", "toml"):
            _make_hostile(path, kind)
            with _Unblock(path):
                assert running.service.reload() is None, f"a {kind} config was applied"
            assert limiter.settings().qps == 10.0 and running.daemon.cfg.workqueue.qps == 10.0, kind
            if path.is_dir():
                path.rmdir()

        # Whatever else goes wrong in a reload is logged, never raised into the signal handler.
        unexpected.append(PermissionError(13, "Permission denied"))  # as for a non-root daemon (tests run as root)
        assert running.service.reload() is None
        assert running.daemon.cfg.workqueue.qps == 10.0

        path.unlink()
        path.write_text("[workqueue]\nqps = 2.5\n")
        assert running.service.reload()["applied"] == ["workqueue.qps"]
        assert limiter.settings().qps == 2.5


@pytest.mark.slow
def test_sighup_with_a_directory_as_the_config_keeps_the_daemon_running():
    from tests.support.daemon import short_tmp_dir

    with short_tmp_dir() as root:
        (root / "learnerd.toml").write_text(CONFIG)
        (root / "logs").mkdir()
        with daemon_process(root) as daemon:
            daemon.wait_ready()
            (root / "learnerd.toml").unlink()
            (root / "learnerd.toml").mkdir()
            daemon.signal(signal.SIGHUP)
            daemon.notify.wait_for("RELOADING=1", timeout=60)
            wait_until(lambda: "reload refused" in daemon.log_text(), timeout=60, what="the reload refused")
            assert daemon.proc.poll() is None, "the daemon is still running"
            assert daemon.client().call("GET", "/status")["state"] == "running"
            (root / "learnerd.toml").rmdir()
            (root / "learnerd.toml").write_text(CONFIG + '\n[logging]\nlevel = "debug"\n')
            daemon.signal(signal.SIGHUP)
            client = daemon.client()
            wait_until(lambda: client.call("GET", "/status")["log_level"] == "debug", timeout=60, what="reloaded")
            assert client.call("POST", "/drain")["state"] == "draining"
            assert daemon.wait() == 0
