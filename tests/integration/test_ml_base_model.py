"""Resolving a document's base_model: built-in names and local directories load; anything else is refused."""

from __future__ import annotations

import shutil

import pytest

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, BaseModelError, load_base, resolve_base_model


def test_builtin_default(models_dir, tiny_model_dir):
    ref = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)
    assert ref.builtin and ref.path == tiny_model_dir
    assert ref.identity.startswith("learnerd/tiny-llama@") and len(ref.identity.split("@")[1]) == 16
    assert resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir) == ref  # stable identity
    no_chat = load_base("learnerd/tiny-llama-no-chat", cache_dir=models_dir)
    assert not no_chat.tokenizer.chat_template
    assert no_chat.ref.identity.split("@")[1] == ref.identity.split("@")[1]  # same weights


def test_local_directory_absolute_and_relative(models_dir, tiny_model_dir, tmp_path):
    local = tmp_path / "my-model"
    shutil.copytree(tiny_model_dir, local)
    base = load_base(str(local), cache_dir=models_dir)
    assert not base.ref.builtin and base.ref.identity.startswith(f"local:{local}@")
    assert base.model.config.model_type == "llama" and base.tokenizer.chat_template
    relative = resolve_base_model("my-model", cache_dir=models_dir, relative_to=tmp_path)
    assert relative.path == local and relative.identity == base.ref.identity
    (local / "model.safetensors").write_bytes(b"x")  # replaced weights change the identity
    assert resolve_base_model(str(local), cache_dir=models_dir).identity != base.ref.identity


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("meta-llama/Llama-3.2-1B", "not a built-in model and no directory"),
        ("qwen2.5-1.5b", "never downloads|not a built-in model"),
        ("hf:HuggingFaceTB/SmolLM2-135M", "never downloads"),
        ("", "base_model is empty"),
    ],
)
def test_unknown_names_are_refused(models_dir, tmp_path, name, needle):
    with pytest.raises(BaseModelError, match=needle):
        resolve_base_model(name, cache_dir=models_dir, relative_to=tmp_path)


def test_directories_without_a_model_are_refused(models_dir, tiny_model_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BaseModelError, match=r"no config\.json"):
        resolve_base_model(str(empty), cache_dir=models_dir)
    (empty / "config.json").write_text("{}")
    with pytest.raises(BaseModelError, match="no weights"):
        resolve_base_model(str(empty), cache_dir=models_dir)
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(BaseModelError, match="not a directory"):
        resolve_base_model(str(file), cache_dir=models_dir)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(BaseModelError, match="cannot load"):
        load_base(str(broken), cache_dir=models_dir)
