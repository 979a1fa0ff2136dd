"""The vLLM export: each trained adapter version of a document becomes ``<dir>/<name>@vNNNN/`` in vLLM's LoRA
resolver layout, the alias ``<dir>/<name>`` follows the newest, old versions go, and a (local, real HTTP)
server speaking vLLM's runtime LoRA API loads each version once and unloads the dropped ones; a failing
server is retried with backoff and shown, never undoing the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from safetensors.torch import load_file

from learnerd.daemon.metrics import DaemonMetrics
from learnerd.reconcilers.vllm_api import VllmServer as VllmClient
from learnerd.reconcilers.vllm_export import VllmExportReconciler
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.training import train_document
from tests.support.vllm_server import BASE_MODEL, vllm_server

pytestmark = pytest.mark.anyio

TRAINING = {"learning_rate": 1e-2, "max_steps": 4}
KEY = "vllm-key-0123456789"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, tiny_model_dir: Path):
    """``learned.dlm`` with two committed adapter versions (a second cycle after one more pair)."""
    import anyio

    root = tmp_path_factory.mktemp("vllm")
    store = AdapterStore(root / "adapters")
    doc = qa_document(root / "docs" / "learned.dlm", QA_PAIRS[:1], training=TRAINING)
    anyio.run(train_document, store, doc, models_dir)
    qa_document(doc, QA_PAIRS[:2], training=TRAINING, dlm_id=read_document(doc).frontmatter.dlm_id)
    anyio.run(train_document, store, doc, models_dir)
    assert [v.number for v in store.list_versions(read_document(doc).frontmatter.dlm_id)] == [1, 2]
    return root, store, doc


def history(root: Path, store: AdapterStore, doc: Path, number: int) -> AdapterStore:
    """A store whose current version of ``doc`` is ``number``: the trained versions up to it, copied."""
    import shutil

    dlm_id = read_document(doc).frontmatter.dlm_id
    copy = root / f"adapters-{number}"
    if not copy.exists():
        shutil.copytree(store.doc_dir(dlm_id), copy / dlm_id, symlinks=True)
        for version in store.list_versions(dlm_id):
            if version.number > number:
                shutil.rmtree(copy / dlm_id / "versions" / version.name)
        (copy / dlm_id / "current").write_text(f"v{number:04d}\n")
    return AdapterStore(copy)


async def test_each_version_is_exported_aliased_and_loaded_once_on_the_vllm_server(trained, tmp_path: Path):
    root, store, doc = trained
    export = tmp_path / "loras"
    with vllm_server(api_key=KEY) as server:
        client = VllmClient(server.url, KEY, timeout_s=10)
        for number in (1, 2):
            reconciler = VllmExportReconciler(
                history(root, store, doc, number), export, docs_roots=[doc.parent], keep=3,
                servers=[client], base_model_name=BASE_MODEL,
            )  # fmt: skip
            assert reconciler.resync_keys() == [str(doc)]
            assert (await reconciler.reconcile(str(doc))).requeue_after is None
            assert (await reconciler.reconcile(str(doc))).requeue_after is None  # idempotent: nothing new
        assert server.loads() == ["learned@v0001", "learned@v0002"]
        assert server.loaded == {f"learned@v000{n}": str(export / f"learned@v000{n}") for n in (1, 2)}
        assert server.unloads() == []
    assert sorted(p.name for p in export.iterdir()) == ["learned", "learned@v0001", "learned@v0002"]
    assert os.readlink(export / "learned") == "learned@v0002"
    assert sorted(p.name for p in (export / "learned@v0002").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert reconciler.changes["written"] == 1 and reconciler.changes["loaded"] == 1


async def test_the_exported_directory_is_what_peft_and_vllms_loader_read(trained, tmp_path: Path, tiny_model_dir: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, store, doc = trained
    export = tmp_path / "loras"
    reconciler = VllmExportReconciler(store, export, docs_roots=[doc.parent], base_model_name=BASE_MODEL)
    await reconciler.reconcile(str(doc))
    version = store.current(read_document(doc).frontmatter.dlm_id)
    config = json.loads((export / "learned" / "adapter_config.json").read_text())
    ours = json.loads((version.path / "adapter_config.json").read_text())
    # vLLM's filesystem resolver: peft_type and base_model_name_or_path; its PEFTHelper: the rest.
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == BASE_MODEL
    assert config["bias"] == "none" and not config["use_dora"] and not config["modules_to_save"]
    assert {k: config[k] for k in ("r", "lora_alpha", "target_modules", "use_rslora")} == {
        k: ours[k] for k in ("r", "lora_alpha", "target_modules", "use_rslora")
    }
    exported = load_file(export / "learned" / "adapter_model.safetensors")
    assert exported.keys() == load_file(version.path / "adapter_model.safetensors").keys()
    assert all(".lora_A." in k or ".lora_B." in k for k in exported)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), export / "learned")
    loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(exported)
    for name, tensor in exported.items():
        assert loaded[name.replace(".weight", ".default.weight")].equal(tensor)


async def test_a_damaged_adapter_is_refused_and_never_loaded(trained, tmp_path: Path):
    """issue 60: weights changed since their commit (finite values) are neither exported nor loaded."""
    import shutil

    from safetensors.torch import save_file

    from learnerd.runtime.reconcile import TerminalError

    _, store, doc = trained
    damaged = tmp_path / "adapters"
    shutil.copytree(store.root, damaged, symlinks=True)
    version = AdapterStore(damaged).current(read_document(doc).frontmatter.dlm_id)
    weights = version.path / "adapter_model.safetensors"
    save_file({k: v * 1.5 for k, v in load_file(weights).items()}, weights)
    export = tmp_path / "loras"
    with vllm_server() as server:
        reconciler = VllmExportReconciler(
            AdapterStore(damaged), export, docs_roots=[doc.parent],
            servers=[VllmClient(server.url, None, timeout_s=10)],
        )  # fmt: skip
        with pytest.raises(TerminalError, match=r"adapter_model\.safetensors has sha256 .* the adapter is damaged"):
            await reconciler.reconcile(str(doc))
        assert server.loads() == []
    assert not export.exists() or list(export.iterdir()) == []
    assert "damaged" in reconciler.warnings[0]


async def test_versions_beyond_keep_are_removed_and_unloaded(trained, tmp_path: Path):
    root, store, doc = trained
    export = tmp_path / "loras"
    with vllm_server() as server:
        for number in (1, 2):
            reconciler = VllmExportReconciler(
                history(root, store, doc, number), export, docs_roots=[doc.parent], keep=1,
                servers=[VllmClient(server.url, None, timeout_s=10)],
            )  # fmt: skip
            await reconciler.reconcile(str(doc))
        assert server.loads() == ["learned@v0001", "learned@v0002"]
        assert server.unloads() == ["learned@v0001"]
        assert list(server.loaded) == ["learned@v0002"]
    assert sorted(p.name for p in export.iterdir()) == ["learned", "learned@v0002"]
    assert reconciler.changes["dropped"] == 1 and reconciler.changes["unloaded"] == 1


async def test_a_failing_server_is_retried_with_backoff_counted_and_shown_while_the_files_are_written(
    trained, tmp_path: Path
):
    _, store, doc = trained
    export = tmp_path / "loras"
    registry = CollectorRegistry()
    with vllm_server() as server:
        server.fail_next = 2
        reconciler = VllmExportReconciler(
            store, export, docs_roots=[doc.parent], servers=[VllmClient(server.url, None, timeout_s=10)],
            retry_base_s=2.0, retry_max_s=60.0, on_failure=DaemonMetrics(registry).vllm_export_failed,
        )  # fmt: skip
        first = await reconciler.reconcile(str(doc))
        assert os.readlink(export / "learned") == "learned@v0002"  # the files do not wait for the server
        second = await reconciler.reconcile(str(doc))
        assert (first.requeue_after, second.requeue_after) == (2.0, 4.0)
        assert reconciler.failures[server.url] == 2
        assert registry.get_sample_value("learnerd_vllm_export_failures_total", {"server": server.url}) == 2
        [warning] = reconciler.warnings
        assert server.url in warning and "HTTP 503" in warning
        assert (await reconciler.reconcile(str(doc))).requeue_after is None
        assert server.loads() == ["learned@v0002"] and reconciler.warnings == []


async def test_a_wrong_token_is_a_counted_failure_not_a_crash(trained, tmp_path: Path):
    _, store, doc = trained
    with vllm_server(api_key=KEY) as server:
        reconciler = VllmExportReconciler(
            store, tmp_path / "loras", docs_roots=[doc.parent], servers=[VllmClient(server.url, "wrong", 10)]
        )
        assert (await reconciler.reconcile(str(doc))).requeue_after == 1.0
        assert "HTTP 401" in reconciler.warnings[0] and server.loaded == {}
