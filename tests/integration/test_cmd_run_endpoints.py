"""``learnerd run``'s endpoint flags refuse to start on bad input, before anything is loaded."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from learnerd.cmd._common import read_config
from learnerd.cmd.main import build_parser, main
from learnerd.cmd.run import service_options
from learnerd.daemon.reload import diff_configs
from learnerd.daemon.statelock import StateLock
from tests.support.daemon import short_tmp_dir

pytestmark = pytest.mark.usefixtures("restore_log_level")


@pytest.fixture
def state():
    with short_tmp_dir() as root:
        yield root / "state"


def run(state: Path, *flags: str) -> list[str]:
    return ["run", "--state-dir", str(state), *flags]


def run_with_config(state: Path, text: str, *flags: str) -> list[str]:
    """:func:`run` with ``--config``: a file beside the state directory holding ``text`` (its token file: ``token``
    beside it)."""
    config = state.parent / "learnerd.toml"
    config.write_text(text)
    return run(state, "--config", str(config), *flags)


@pytest.mark.parametrize("token", [None, "", "short"])
def test_search_over_tcp_needs_a_long_enough_token(state: Path, token, monkeypatch, capsys):
    if token is None:
        monkeypatch.delenv("LEARNERD_SEARCH_TOKEN", raising=False)
    else:
        monkeypatch.setenv("LEARNERD_SEARCH_TOKEN", token)
    assert main(run(state, "--listen-search", "127.0.0.1:0")) == 2
    err = capsys.readouterr().err
    assert "LEARNERD_SEARCH_TOKEN" in err
    assert not state.exists(), "refused before touching the state directory"


@pytest.mark.parametrize(("addr", "token"), [("0.0.0.0:0", None), ("192.0.2.1:0", None), ("127.0.0.1:0", "short")])
def test_the_openai_endpoint_off_loopback_needs_a_token(state: Path, addr: str, token, monkeypatch, capsys):
    if token is None:
        monkeypatch.delenv("LEARNERD_OPENAI_TOKEN", raising=False)
    else:
        monkeypatch.setenv("LEARNERD_OPENAI_TOKEN", token)
    assert main(run(state, "--listen-openai", addr)) == 2
    assert "LEARNERD_OPENAI_TOKEN" in capsys.readouterr().err
    assert not state.exists(), "refused before touching the state directory"


def test_retrieval_on_the_openai_endpoint_needs_a_token_even_on_loopback(state: Path, monkeypatch, capsys):
    """``[serve] rag_k`` puts every user's learned examples into answers: as ``/search``, it needs a token."""
    monkeypatch.delenv("LEARNERD_OPENAI_TOKEN", raising=False)
    assert main(run_with_config(state, "[serve]\nrag_k = 3\n", "--listen-openai", "127.0.0.1:0")) == 2
    err = capsys.readouterr().err
    assert "serving retrieved examples ([serve] rag_k) needs a bearer token: run `learnerd init`" in err
    assert "or set $LEARNERD_OPENAI_TOKEN" in err
    assert not state.exists(), "refused before touching the state directory"


@pytest.mark.parametrize("addr", ["9464", "localhost:", "host:99999", ":9464"])
def test_a_malformed_address_is_refused(state: Path, addr: str, capsys):
    assert main(run(state, "--metrics-addr", addr)) == 2
    assert "--metrics-addr must be HOST:PORT" in capsys.readouterr().err


def test_a_busy_port_stops_the_start_with_a_clear_message_and_leaves_nothing_behind(state: Path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(run(state, "--metrics-addr", f"127.0.0.1:{port}")) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (state / "learnerd.sock").exists(), "the admin socket is removed again"
    with StateLock(state):
        pass  # and the lock was released


def test_insecure_no_token_needs_a_loopback_openai_endpoint(state: Path, monkeypatch, capsys):
    monkeypatch.setenv("LEARNERD_OPENAI_TOKEN", "a-token-of-enough-characters")
    assert main(run(state, "--insecure-no-token")) == 2
    assert "--insecure-no-token is about the OpenAI endpoint: add --listen-openai" in capsys.readouterr().err
    assert main(run(state, "--insecure-no-token", "--listen-openai", "0.0.0.0:0")) == 2
    assert "serves requests without the token on loopback only, not 0.0.0.0:0" in capsys.readouterr().err
    assert not state.exists(), "refused before touching the state directory"


def test_a_token_file_others_may_read_is_refused(state: Path, monkeypatch, capsys):
    """The token file of ``learnerd init`` is a secret: the daemon refuses one that group or others may read."""
    monkeypatch.delenv("LEARNERD_OPENAI_TOKEN", raising=False)
    token = state.parent / "token"
    token.write_text("a-token-of-enough-characters\n")
    token.chmod(0o640)
    assert main(run_with_config(state, "", "--listen-openai", "127.0.0.1:0")) == 2
    assert f"the token file {token} is open to other users (mode 0640): chmod 600 it" in capsys.readouterr().err
    assert not state.exists(), "refused before touching the state directory"


def test_a_reload_reports_only_what_changed_in_the_file_not_the_command_lines_listeners(state: Path, monkeypatch):
    """Issue 60, finding 13: ``ctl reload`` listed the listeners given as flags as changed to ``""`` (the file's)."""
    monkeypatch.setenv("LEARNERD_OPENAI_TOKEN", "a-token-of-enough-characters")
    monkeypatch.setenv("LEARNERD_SEARCH_TOKEN", "a-token-of-enough-characters")
    config = state.parent / "learnerd.toml"
    config.write_text("")
    flags = ["--listen-openai", "127.0.0.1:0", "--listen-search", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]
    args = build_parser().parse_args(
        ["run", "--config", str(config), *flags, "--listen-rpc", "127.0.0.1:0", "--no-train"]
    )
    cfg = read_config(args)
    options = service_options(cfg, args)
    assert (cfg.serve.listen, cfg.rpc.listen, cfg.training.enabled) == ("127.0.0.1:0", "127.0.0.1:0", False)
    assert diff_configs(cfg, options.reload_config()) == {}
    config.write_text("[shutdown]\ndrain_timeout_s = 5.0\n")
    assert diff_configs(cfg, options.reload_config()) == {"shutdown.drain_timeout_s": (30.0, 5.0)}
