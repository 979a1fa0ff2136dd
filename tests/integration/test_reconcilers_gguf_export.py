"""The GGUF export reconciler: a document's current adapter becomes ``<dir>/<name>@vNNNN.gguf`` and the alias
``<dir>/<name>.gguf``; a base that came from no GGUF file and cannot be converted (the built-in tiny model:
no BPE merges) is a warning naming the reason, not a failure; an adapter llama.cpp cannot apply, or one whose
files changed since its commit, is refused terminally with nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from learnerd.reconcilers.gguf_export import GgufExportReconciler
from learnerd.runtime.reconcile import TerminalError
from learnerd.store.adapters import METADATA_FILE, AdapterStore, adapter_hashes
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.training import train_document

pytestmark = pytest.mark.anyio


async def test_the_current_adapter_is_exported_and_a_base_that_cannot_be_converted_is_a_warning(
    tmp_path: Path, models_dir: Path
):
    store = AdapterStore(tmp_path / "adapters")
    doc = qa_document(tmp_path / "docs" / "notes.dlm", QA_PAIRS[:2], training={"learning_rate": 1e-2, "max_steps": 4})
    version = (await train_document(store, doc, models_dir)).version
    export = tmp_path / "gguf"
    reconciler = GgufExportReconciler(store, export, docs_roots=[doc.parent], models_dir=models_dir)
    assert reconciler.resync_keys() == [str(doc)]
    assert (await reconciler.reconcile(str(doc))).requeue_after is None
    assert sorted(p.name for p in export.iterdir()) == ["notes.gguf", "notes@v0001.gguf"]
    assert os.readlink(export / "notes.gguf") == "notes@v0001.gguf"
    [warning] = reconciler.warnings
    assert "learnerd/tiny-llama" in warning and "no BPE merges" in warning
    assert reconciler.changes == {"written": 1}

    config = json.loads((version.path / "adapter_config.json").read_text())
    (version.path / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    (export / "notes@v0001.gguf").unlink()
    with pytest.raises(TerminalError, match=r"adapter_config\.json has sha256 .* the adapter is damaged"):
        await reconciler.reconcile(str(doc))  # issue 60: a file changed since its commit is never exported
    assert sorted(p.name for p in export.iterdir()) == ["notes.gguf"]  # the alias is left; nothing half-written
    metadata = json.loads((version.path / METADATA_FILE).read_text())
    metadata["content_sha256"] = adapter_hashes(version.path)  # as if committed as a DoRA adapter
    (version.path / METADATA_FILE).write_text(json.dumps(metadata))
    with pytest.raises(TerminalError, match="DoRA"):
        await reconciler.reconcile(str(doc))
    assert sorted(p.name for p in export.iterdir()) == ["notes.gguf"]
    assert "DoRA" in reconciler.warnings[0]
