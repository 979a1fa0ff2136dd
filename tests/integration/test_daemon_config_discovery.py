"""Where learnerd finds its config, the warning when nothing is watched, and ``learnerd init`` (issue 15,
item 6)."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest
import structlog
from pydantic import BaseModel

from learnerd.api.settings import OPENAI_TOKEN_ENV, RPC_TOKEN_ENV
from learnerd.api.tcp_endpoints import SEARCH_TOKEN_ENV
from learnerd.api.tokens import MIN_TOKEN_CHARS, TokenError, client_token, read_token_file, surface_token
from learnerd.client import LearnerdClient
from learnerd.cmd._common import read_config
from learnerd.cmd.init import installed_bases
from learnerd.cmd.main import build_parser, main
from learnerd.cmd.run import warn_if_nothing_is_watched
from learnerd.daemon.config import Config, config_candidates, config_from_dict, load_config, reference
from learnerd.ml.base_model import DEFAULT_BASE_MODEL, SMOLLM2_INSTRUCT
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.ml.hub_cache import DLM_REGISTRY
from learnerd.store.dlm import read_document

pytestmark = pytest.mark.usefixtures("restore_log_level")


def ctl_args(*extra: str):
    return build_parser().parse_args(["ctl", "status", *extra])


@pytest.fixture
def homes(tmp_path: Path, monkeypatch) -> Path:
    """``$XDG_CONFIG_HOME`` in ``tmp_path``, no ``$LEARNERD_CONFIG``."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LEARNERD_CONFIG", raising=False)
    return tmp_path


def write_config(path: Path, state: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'state_dir = "{state}"\n')
    return path


def test_the_xdg_config_is_found_without_flags(homes: Path):
    xdg = write_config(homes / "xdg" / "learnerd" / "config.toml", "from-xdg")
    cfg = read_config(ctl_args())
    assert cfg.path == xdg and cfg.state_dir == xdg.parent / "from-xdg"


def test_the_flag_wins_over_the_environment_which_wins_over_xdg(homes: Path, monkeypatch):
    write_config(homes / "xdg" / "learnerd" / "config.toml", "from-xdg")
    env = write_config(homes / "env.toml", "from-env")
    flag = write_config(homes / "flag.toml", "from-flag")
    monkeypatch.setenv("LEARNERD_CONFIG", str(env))
    assert read_config(ctl_args()).path == env
    assert read_config(ctl_args("--config", str(flag))).path == flag


def test_the_candidates_are_xdg_then_etc(homes: Path, monkeypatch):
    assert config_candidates() == [homes / "xdg" / "learnerd" / "config.toml", Path("/etc/learnerd/config.toml")]
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_candidates()[0] == Path("~/.config/learnerd/config.toml").expanduser()


def test_nothing_found_gives_the_defaults(homes: Path):
    cfg = read_config(ctl_args())
    if Path("/etc/learnerd/config.toml").exists():
        pytest.skip("this machine has /etc/learnerd/config.toml")
    assert cfg.path is None and cfg.log_dirs == []


def test_a_config_without_log_dirs_is_warned_about(tmp_path: Path):
    cfg = config_from_dict({}, base=tmp_path, path=tmp_path / "c.toml")
    with structlog.testing.capture_logs() as logs:
        warn_if_nothing_is_watched(cfg)
        warn_if_nothing_is_watched(config_from_dict({"log_dirs": ["logs"]}, base=tmp_path))
        warn_if_nothing_is_watched(config_from_dict({"rpc": {"listen": "127.0.0.1:0"}}, base=tmp_path))  # /v1/blocks
    assert [e["log_level"] for e in logs] == ["warning"]
    assert "no log directory is watched" in logs[0]["event"] and str(tmp_path / "c.toml") in logs[0]["event"]


def test_init_writes_a_commented_config_and_a_valid_document(homes: Path, capsys):
    target = homes / "project"
    assert main(["init", str(target), "--log-dir", str(homes / "logs")]) == 0
    out = capsys.readouterr().out
    config, document = target / "config.toml", target / "docs" / "learned.dlm"
    assert f"next: learnerd run --config {config}" in out

    cfg = load_config(config)
    assert cfg.log_dirs == [homes / "logs"] and cfg.docs_dirs == [target / "docs"]
    lines = config.read_text().splitlines()
    commented = "".join(line.removeprefix("#").removeprefix(" ") + "\n" for line in lines if line.startswith("#"))
    assert reference() in commented, "every setting is listed, commented out"

    doc = read_document(document)
    assert set(doc.frontmatter.raw) == {"dlm_id", "dlm_version", "base_model"}, "no hyperparameters: the recipe"
    assert doc.frontmatter.base_model == Config().probes.base_model == DEFAULT_BASE_MODEL
    assert f"base model: {DEFAULT_BASE_MODEL}, the built-in random model" in out

    before = config.read_text()
    assert main(["init", str(target)]) == 1
    assert "already exists" in capsys.readouterr().err and config.read_text() == before

    assert main(["init", str(homes / "other"), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    other = read_document(homes / "other" / "docs" / "learned.dlm").frontmatter.dlm_id
    assert other != doc.frontmatter.dlm_id and written["dlm_id"] == other
    assert written["base_model"] == DEFAULT_BASE_MODEL and written["installed_bases"] == installed_bases()
    assert written["next"] == f"learnerd run --config {homes / 'other' / 'config.toml'} --log-dir DIR"


def test_init_names_the_pretrained_bases_installed_and_the_one_it_chose(homes: Path, capsys, monkeypatch):
    from huggingface_hub import constants

    cache = homes / "hf-hub"
    snapshot = cache / ("models--" + DLM_REGISTRY["qwen2.5-0.5b"].repo_id.replace("/", "--")) / "snapshots"
    (snapshot / DLM_REGISTRY["qwen2.5-0.5b"].revision).mkdir(parents=True)  # what snapshot_download finds
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    smollm2 = [SMOLLM2_INSTRUCT] if find_smollm2_gguf() is not None else []
    assert installed_bases() == [*smollm2, "qwen2.5-0.5b"]

    assert main(["init", str(homes / "a"), "--base-model", "qwen2.5-0.5b"]) == 0
    out = capsys.readouterr().out
    assert "base model: qwen2.5-0.5b, pretrained, installed" in out
    assert read_document(homes / "a" / "docs" / "learned.dlm").frontmatter.base_model == "qwen2.5-0.5b"
    if smollm2:
        assert f"pretrained bases installed here: {SMOLLM2_INSTRUCT} (to use one" in out
    assert main(["init", str(homes / "b"), "--base-model", "qwen2.5-1.5b"]) == 0
    assert "not in the Hugging Face cache here: hf download Qwen/Qwen2.5-1.5B-Instruct" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["init", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"{SMOLLM2_INSTRUCT} ({'installed' if smollm2 else 'not installed'}" in help_text


def test_init_into_the_xdg_directory_needs_no_flag_next(homes: Path, capsys):
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert "next: learnerd run --log-dir DIR" in out and "add your assistant's log directory" in out
    assert read_config(ctl_args()).path == homes / "xdg" / "learnerd" / "config.toml"
    assert f"wrote {homes / 'xdg' / 'learnerd' / 'token'} (the bearer token, mode 0600" in out
    assert "export LEARNERD_CONFIG" not in out, "clients find the token in the default directory"


def test_init_writes_a_private_token_that_the_daemon_and_the_clients_read(homes: Path, capsys, monkeypatch):
    """``learnerd init`` writes a random token, 0600, never replaced; the daemon's surfaces and learnerd's clients
    read it beside the config (each surface's variable wins); the daemon refuses a token file others may read."""
    for env in (OPENAI_TOKEN_ENV, RPC_TOKEN_ENV, SEARCH_TOKEN_ENV):
        monkeypatch.delenv(env, raising=False)
    target = homes / "project"
    assert main(["init", str(target), "--json"]) == 0
    token_file = target / "token"
    assert json.loads(capsys.readouterr().out)["token_file"] == str(token_file)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= MIN_TOKEN_CHARS and token.isascii()

    config = target / "config.toml"
    assert surface_token(OPENAI_TOKEN_ENV, config) == (token, str(token_file))
    assert client_token(OPENAI_TOKEN_ENV) is None, "not in the default directory: a client needs LEARNERD_CONFIG"
    monkeypatch.setenv("LEARNERD_CONFIG", str(config))
    with LearnerdClient(openai_url="http://127.0.0.1:1/v1", rpc_url="http://127.0.0.1:1") as client:
        assert client.openai_key == token and client.rpc_headers == {"Authorization": f"Bearer {token}"}
    monkeypatch.setenv(OPENAI_TOKEN_ENV, "from-the-environment-0123")
    assert client_token(OPENAI_TOKEN_ENV) == "from-the-environment-0123"
    assert surface_token(OPENAI_TOKEN_ENV, config) == ("from-the-environment-0123", f"${OPENAI_TOKEN_ENV}")

    target.joinpath("config.toml").unlink()
    target.joinpath("docs", "learned.dlm").unlink()
    assert main(["init", str(target)]) == 0
    assert f"kept {token_file}" in capsys.readouterr().out and token_file.read_text().strip() == token
    token_file.chmod(0o644)
    with pytest.raises(TokenError, match="open to other users \\(mode 0644\\): chmod 600 it"):
        read_token_file(token_file)


def test_the_reference_lists_every_setting_at_its_default(tmp_path: Path):
    raw = tomllib.loads(reference())
    cfg, defaults = config_from_dict(raw, base=tmp_path), Config()
    for name in Config.model_fields:
        value = getattr(defaults, name)
        if isinstance(value, BaseModel):
            assert set(raw[name]) == set(type(value).model_fields), name
            assert getattr(cfg, name) == value, name
    assert cfg.controllers == defaults.controllers
