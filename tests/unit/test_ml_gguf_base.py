"""The base GGUF converter's refusals, each naming its reason with nothing written, and llama.cpp's
pre-tokenizer names read from ``tokenizer.json``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from learnerd.ml.gguf_base import BASE_CACHE, GGUFBaseError, ensure_base_gguf, llama_pre_tokenizer

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def test_the_built_in_tiny_model_is_refused_for_its_tokenizer_without_merges(tiny_model_dir: Path, tmp_path: Path):
    with pytest.raises(GGUFBaseError, match="no BPE merges"):
        ensure_base_gguf(tiny_model_dir, "learnerd/tiny-llama@0", tmp_path)
    assert not (tmp_path / BASE_CACHE).exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, "only Llama models"),
     ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope scaling 'llama3'"),
     ({"attention_bias": True}, "biases")],
)  # fmt: skip
def test_a_directory_llamacpp_would_run_differently_is_refused(
    tiny_model_dir: Path, tmp_path: Path, change: dict, reason: str
):
    directory = tmp_path / "model"
    shutil.copytree(tiny_model_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(GGUFBaseError, match=reason):
        ensure_base_gguf(directory, "local:x@0", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_llamacpps_pre_tokenizer_is_named_from_the_tokenizer_json_split():
    assert llama_pre_tokenizer(BYTE_LEVEL) == "gpt-2"
    digits = {"type": "Digits", "individual_digits": True}
    assert llama_pre_tokenizer({"type": "Sequence", "pretokenizers": [digits, BYTE_LEVEL]}) == "smollm"
    for unknown in (
        {**BYTE_LEVEL, "add_prefix_space": True},
        {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"}}, BYTE_LEVEL]},
        None,
    ):
        with pytest.raises(GGUFBaseError, match="no pre-tokenizer known"):
            llama_pre_tokenizer(unknown)
