"""``[serve] backend``: transformers by default, llama.cpp on request (steering too, as llama.cpp's logit bias); an
unknown backend is refused with the choices; context-aware decoding (``[serve] context_alpha``) and the choice of a
quoted command (``[serve] choose_quoted``, ``choice_margin``) are served on the transformers backend only."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.daemon.config import load_config
from learnerd.sections import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "learnerd.toml"
    path.write_text(text)
    return path


def test_the_transformers_backend_is_the_default(tmp_path: Path):
    assert load_config(write(tmp_path, "[serve]\nrag_k = 1\n")).serve.backend == "transformers"


def test_the_llamacpp_backend_is_chosen_with_its_thread_count(tmp_path: Path):
    serve = load_config(write(tmp_path, '[serve]\nbackend = "llamacpp"\nnum_threads = 3\n')).serve
    assert (serve.backend, serve.num_threads) == ("llamacpp", 3)


def test_steering_with_the_llamacpp_backend_is_accepted(tmp_path: Path):
    serve = load_config(write(tmp_path, '[serve]\nbackend = "llamacpp"\nsteering = true\n')).serve
    assert (serve.backend, serve.steering) == ("llamacpp", True)


def test_an_unknown_backend_is_refused_with_the_choices(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"serve.backend.*'transformers'.*'llamacpp'"):
        load_config(write(tmp_path, '[serve]\nbackend = "vllm"\n'))


def test_context_aware_decoding_is_served_on_the_transformers_backend_only(tmp_path: Path):
    assert load_config(write(tmp_path, "")).serve.served_context_alpha == 0.5
    assert load_config(write(tmp_path, "[serve]\ncontext_alpha = 1.0\n")).serve.served_context_alpha == 1.0
    llamacpp = load_config(write(tmp_path, '[serve]\nbackend = "llamacpp"\ncontext_alpha = 1.0\n')).serve
    assert (llamacpp.context_alpha, llamacpp.served_context_alpha) == (1.0, 0.0)
    with pytest.raises(ConfigError, match="context_alpha"):
        load_config(write(tmp_path, "[serve]\ncontext_alpha = -0.5\n"))


def test_the_choice_of_a_quoted_command_is_served_on_the_transformers_backend_only(tmp_path: Path):
    assert load_config(write(tmp_path, "")).serve.served_choice_margin == 0.5
    assert load_config(write(tmp_path, "[serve]\nchoice_margin = 1.5\n")).serve.served_choice_margin == 1.5
    assert load_config(write(tmp_path, "[serve]\nchoose_quoted = false\n")).serve.served_choice_margin is None
    llamacpp = load_config(write(tmp_path, '[serve]\nbackend = "llamacpp"\n')).serve
    assert (llamacpp.choice_margin, llamacpp.served_choice_margin) == (0.5, None)
    with pytest.raises(ConfigError, match="choice_margin"):
        load_config(write(tmp_path, "[serve]\nchoice_margin = -0.1\n"))
