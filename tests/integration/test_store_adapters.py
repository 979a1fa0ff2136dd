"""The versioned adapter store: numbered versions committed as candidates, an atomically swapped `current` that
only a promotion moves, gate verdicts beside the versions, nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.loader import load_adapter
from learnerd.store import adapters as adapters_module
from learnerd.store.adapters import AdapterMetadata, AdapterStore, AdapterStoreError, GateVerdict
from learnerd.store.dlm import TrainingConfig
from learnerd.training.lora import attach_lora
from tests.conftest import cli_env


def _metadata(**overrides) -> AdapterMetadata:
    values = dict(
        base_model="learnerd/tiny-llama",
        base_model_identity="learnerd/tiny-llama@0123456789abcdef",
        section_ids=("a", "b"),
        new_section_ids=("a", "b"),
        replay_section_ids=(),
        parent_version=None,
        steps=3,
        start_loss=5.5,
        final_loss=1.25,
        tokens_trained=100,
        seed=42,
        hyperparameters=TrainingConfig().to_dict(),
        library_versions={"torch": torch.__version__},
        created_at="2026-01-01T00:00:00+00:00",
    )
    values.update(overrides)
    return AdapterMetadata(**values)


@pytest.fixture
def adapter_writer(tiny_model_dir):
    """Saves a freshly initialised LoRA adapter (seeded: each seed gives different weights) into a directory."""

    def write(directory, seed: int) -> dict[str, torch.Tensor]:
        model, _ = load_model_directory(tiny_model_dir)
        peft_model = attach_lora(model, TrainingConfig(seed=seed))
        for name, param in peft_model.named_parameters():  # LoRA B starts at zero: make the adapter non-trivial
            if "lora_B" in name:
                torch.nn.init.normal_(param, generator=torch.Generator().manual_seed(seed))
        peft_model.save_pretrained(directory)
        return {k: v.clone() for k, v in peft_model.state_dict().items() if "lora_" in k}

    return write


def test_commit_numbers_candidates_and_promotion_moves_current(tmp_path, adapter_writer, tiny_model_dir):
    store = AdapterStore(tmp_path / "adapters")
    assert store.current("doc") is None and store.list_versions("doc") == [] and store.doc_keys() == []
    weights = {}
    for seed in (1, 2):
        with store.stage("doc") as staging:
            weights[seed] = adapter_writer(staging.path, seed)
            version = store.commit(staging, _metadata(seed=seed, parent_version=seed - 1 or None))
        assert not staging.path.exists()
        assert version.name == f"v000{seed}" and store.candidate("doc") == store.latest("doc") == version
        assert store.current("doc") == (None if seed == 1 else store.resolve("doc", 1))  # a candidate is not current
        assert store.promote(version) and store.current("doc") == version and store.candidate("doc") is None
    assert [v.number for v in store.list_versions("doc")] == [1, 2] and store.doc_keys() == ["doc"]
    assert (tmp_path / "adapters" / "doc" / "current").read_text() == "v0002\n"
    meta = store.current("doc").metadata()
    assert meta.version == 2 and meta.seed == 2 and meta.section_ids == ("a", "b") and meta.parent_version == 1
    assert json.loads((store.current("doc").path / "metadata.json").read_text())["schema_version"] == 1
    for ref in ("v1", "v0001", "1", 1):
        assert store.resolve("doc", ref).number == 1
    assert store.resolve("doc", "current").number == 2
    with pytest.raises(AdapterStoreError, match=r"no adapter v0007 \(versions: v0001, v0002\)"):
        store.resolve("doc", "v7")
    with pytest.raises(AdapterStoreError, match="not an adapter version"):
        store.resolve("doc", "latest")
    # Each version loads onto the base with its own weights.
    for seed in (1, 2):
        model, _ = load_model_directory(tiny_model_dir)
        loaded = load_adapter(model, store.resolve("doc", seed))
        state = {k: v for k, v in loaded.state_dict().items() if "lora_" in k}
        assert state.keys() == weights[seed].keys()
        assert all(torch.equal(state[k], weights[seed][k]) for k in state)


def test_leaving_the_stage_without_commit_leaves_nothing(tmp_path, adapter_writer):
    store = AdapterStore(tmp_path)
    with pytest.raises(RuntimeError), store.stage("doc") as staging:
        adapter_writer(staging.path, 1)
        raise RuntimeError("training failed")
    assert list((tmp_path / "doc" / "versions").iterdir()) == []
    with store.stage("doc") as staging, pytest.raises(AdapterStoreError, match=r"no adapter_config\.json"):
        store.commit(staging, _metadata())
    assert store.current("doc") is None


def test_crash_before_the_pointer_swap_keeps_the_previous_current(tmp_path, adapter_writer, monkeypatch):
    store = AdapterStore(tmp_path)
    with store.stage("doc") as staging:
        adapter_writer(staging.path, 1)
        store.promote(store.commit(staging, _metadata()))
    with store.stage("doc") as staging:
        adapter_writer(staging.path, 2)
        v2 = store.commit(staging, _metadata())

    def power_cut(*args, **kwargs):
        raise OSError("power cut")

    monkeypatch.setattr(adapters_module, "atomic_write_text", power_cut)
    with pytest.raises(OSError, match="power cut"):
        store.promote(v2)
    assert store.current("doc").number == 1
    # v0002 is complete (renamed only after fsync), so listing it is safe; it just is not current.
    assert [v.number for v in store.list_versions("doc")] == [1, 2] and store.candidate("doc") == v2
    assert store.resolve("doc", 2).metadata().version == 2
    monkeypatch.undo()
    assert store.promote(v2) and store.current("doc") == v2


def test_promotion_moves_current_forward_only(tmp_path, adapter_writer):
    store = AdapterStore(tmp_path)
    versions = []
    for seed in (1, 2):
        with store.stage("doc") as staging:
            adapter_writer(staging.path, seed)
            versions.append(store.commit(staging, _metadata()))
    assert store.promote(versions[1]) and not store.promote(versions[0]) and not store.promote(versions[1])
    assert store.current("doc") == versions[1] and store.candidate("doc") is None


def test_a_rejected_candidate_keeps_its_directory_and_verdict(tmp_path, adapter_writer):
    store = AdapterStore(tmp_path)
    with store.stage("doc") as staging:
        adapter_writer(staging.path, 1)
        v1 = store.commit(staging, _metadata())
    assert v1.verdict() is None and store.rejected("doc") is None
    verdict = GateVerdict(
        "rejected",
        ("answer_retention: kept 1/5",),
        ({"name": "x", "outcome": "fail", "detail": "d"},),
        None,
        "2026-01-01T00:00:00+00:00",
    )
    store.record_verdict(v1, verdict)
    assert v1.verdict() == verdict and store.rejected("doc") == (v1, verdict)
    assert store.current("doc") is None and (v1.path / "adapter_config.json").is_file()
    with pytest.raises(AdapterStoreError, match=r"no promoted adapter yet \(its candidate v0001"):
        store.resolve("doc", "current")
    assert store.resolve("doc", "v1") == v1
    (v1.path / "verdict.json").write_text("{not json")
    with pytest.raises(AdapterStoreError, match="unreadable gate verdict"):
        v1.verdict()


def test_recover_removes_staging_of_dead_writers_only(tmp_path):
    store = AdapterStore(tmp_path)
    # A writer process that dies (kill -9) while holding its staging directory.
    script = textwrap.dedent(
        f"""
        import os, signal
        from learnerd.store.adapters import GateVerdict, AdapterStore
        with AdapterStore({str(tmp_path)!r}).stage("doc") as staging:
            (staging.path / "adapter_model.safetensors").write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], env=cli_env())
    assert proc.returncode == -9
    [stale] = (tmp_path / "doc" / "versions").glob(".staging-*")
    assert store.list_versions("doc") == [] and store.current("doc") is None
    with store.stage("doc") as live:
        assert store.recover() == [stale]
        assert live.path.is_dir()  # a staging directory whose writer is alive is kept
    assert list((tmp_path / "doc" / "versions").iterdir()) == []


def test_invalid_keys_and_dangling_pointer(tmp_path):
    store = AdapterStore(tmp_path)
    for key in ("", "../x", ".hidden", "a/b", "x" * 129):
        with pytest.raises(AdapterStoreError, match="invalid document key"):
            store.current(key)
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "current").write_text("v0009\n")
    with pytest.raises(AdapterStoreError, match="not a committed version"):
        store.current("doc")


def test_a_damaged_adapter_fails_its_load_whatever_its_values(tmp_path, adapter_writer, tiny_model_dir):
    """The hashes recorded at commit are checked before every load: a weight file with other, finite values
    (which the known-answer check alone would pass), or a missing file, is a failed load, never a model."""
    from safetensors.torch import load_file, save_file

    from learnerd.ml.loader import ModelCheckError

    store = AdapterStore(tmp_path / "adapters")
    with store.stage("doc") as staging:
        adapter_writer(staging.path, 1)
        version = store.commit(staging, _metadata())
    recorded = version.metadata().content_sha256
    assert sorted(recorded) == ["adapter_config.json", "adapter_model.safetensors"]
    version.verify()
    weights_file = version.path / "adapter_model.safetensors"
    tensors = load_file(weights_file)
    save_file({k: v * 1.5 for k, v in tensors.items()}, weights_file)  # finite, plausible, not what was committed
    model, _ = load_model_directory(tiny_model_dir)
    with pytest.raises(ModelCheckError, match=r"adapter_model\.safetensors has sha256 .* the adapter is damaged"):
        load_adapter(model, version)
    assert not hasattr(model, "peft_config"), "the base was left as it was"
    weights_file.unlink()
    with pytest.raises(adapters_module.AdapterIntegrityError, match=r"adapter_model\.safetensors is missing"):
        version.verify()


def test_a_version_committed_before_hashes_were_recorded_loads_unchecked(tmp_path, adapter_writer, tiny_model_dir):
    store = AdapterStore(tmp_path / "adapters")
    with store.stage("doc") as staging:
        adapter_writer(staging.path, 1)
        version = store.commit(staging, _metadata())
    meta_file = version.path / "metadata.json"
    meta = json.loads(meta_file.read_text())
    del meta["content_sha256"]
    meta_file.write_text(json.dumps(meta))
    assert version.metadata().content_sha256 == {}
    model, _ = load_model_directory(tiny_model_dir)
    load_adapter(model, version)
