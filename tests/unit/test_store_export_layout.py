"""The versioned export layout (with vLLM's adapter directories): versions appear whole, the alias is replaced by
rename, a crash mid-export leaves the previous export intact, a crash's leftovers go at the next publish, and
adapters vLLM cannot load are refused before anything is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from learnerd.store.adapters import AdapterVersion
from learnerd.store.export_layout import ExportRefused, exported_versions, publish
from learnerd.store.vllm_layout import vllm_adapter_writer


def publish_vllm(export: Path, name: str, v: AdapterVersion, keep: int, base_model_name: str | None = None):
    return publish(export, name, v.number, keep, vllm_adapter_writer(v, base_model_name))


CONFIG = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "bias": "none",
          "use_dora": False, "modules_to_save": None, "base_model_name_or_path": "/models/tiny"}  # fmt: skip


def version(root: Path, number: int, **config) -> AdapterVersion:
    path = root / "store" / f"v{number:04d}"
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({**CONFIG, **config}))
    tensor = np.full((4, 8), number, dtype=np.float32)
    save_file(
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": tensor}, path / "adapter_model.safetensors"
    )
    return AdapterVersion("doc-1", number, path)


def test_publish_writes_the_version_whole_and_points_the_alias_at_it(tmp_path: Path):
    export = tmp_path / "loras"
    published = publish_vllm(export, "learned", version(tmp_path, 1), keep=3, base_model_name="org/base")
    assert (published.name, published.written, published.kept, published.dropped) == (
        "learned@v0001",
        True,
        ("learned@v0001",),
        (),
    )
    assert os.readlink(export / "learned") == "learned@v0001"
    config = json.loads((export / "learned" / "adapter_config.json").read_text())
    assert config == {**CONFIG, "base_model_name_or_path": "org/base"}
    assert sorted(p.name for p in export.iterdir()) == ["learned", "learned@v0001"]
    again = AdapterVersion("doc-1", 1, tmp_path / "store" / "v0001")
    assert publish_vllm(export, "learned", again, keep=3).written is False  # idempotent


def test_keep_leaves_the_newest_versions_and_the_aliased_one(tmp_path: Path):
    export = tmp_path / "loras"
    versions = [version(tmp_path, n) for n in (1, 2, 3, 4)]
    for v in versions:
        published = publish_vllm(export, "learned", v, keep=2)
    assert published.kept == ("learned@v0003", "learned@v0004") and published.dropped == ("learned@v0002",)
    assert list(exported_versions(export, "learned")) == [3, 4]
    back = publish_vllm(export, "learned", versions[0], keep=2)  # a rollback to v0001 keeps it and the newest other
    assert back.kept == ("learned@v0001", "learned@v0004") and os.readlink(export / "learned") == "learned@v0001"


def test_a_crash_mid_export_leaves_the_previous_export_intact(tmp_path: Path):
    export = tmp_path / "loras"
    publish_vllm(export, "learned", version(tmp_path, 1), keep=3)
    broken = version(tmp_path, 2)
    (broken.path / "adapter_model.safetensors").unlink()  # the copy fails half-way through the version
    with pytest.raises(FileNotFoundError):
        publish_vllm(export, "learned", broken, keep=3)
    assert sorted(p.name for p in export.iterdir()) == ["learned", "learned@v0001"]
    assert os.readlink(export / "learned") == "learned@v0001"


def test_a_crashs_leftovers_of_a_name_go_at_its_next_publish_and_no_others(tmp_path: Path):
    export = tmp_path / "loras"
    for leftover in (".staging-learned@v0002-abc", ".dropped-learned@v0000-xyz", ".staging-learned-notes@v0001-q"):
        (export / leftover).mkdir(parents=True)
    (export / ".staging-learned@alias-123").symlink_to("learned@v0009")
    publish_vllm(export, "learned", version(tmp_path, 1), keep=3)
    assert sorted(p.name for p in export.iterdir()) == [".staging-learned-notes@v0001-q", "learned", "learned@v0001"]


@pytest.mark.parametrize(
    ("config", "reason"),
    [({"use_dora": True}, "DoRA"), ({"bias": "lora_only"}, "bias"),
     ({"modules_to_save": ["lm_head"]}, "modules_to_save"), ({"peft_type": "IA3"}, "peft_type")],
)  # fmt: skip
def test_an_adapter_vllm_cannot_load_is_refused_before_anything_is_written(tmp_path: Path, config, reason):
    export = tmp_path / "loras"
    with pytest.raises(ExportRefused, match=reason):
        publish_vllm(export, "learned", version(tmp_path, 1, **config), keep=3)
    assert list(export.iterdir()) == []


def test_an_alias_that_is_not_a_symbolic_link_is_left_alone(tmp_path: Path):
    export = tmp_path / "loras"
    (export / "learned").mkdir(parents=True)
    (export / "learned" / "mine.txt").write_text("a person's files")
    with pytest.raises(ExportRefused, match="not the alias"):
        publish_vllm(export, "learned", version(tmp_path, 1), keep=3)
    assert [p.name for p in export.iterdir()] == ["learned"]


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "doc@v1"])
def test_a_name_the_layout_cannot_hold_is_refused(tmp_path: Path, name: str):
    with pytest.raises(ExportRefused):
        publish_vllm(tmp_path / "loras", name, version(tmp_path, 1), keep=3)
