"""After each trained cycle of a real daemon, ``[export.vllm] dir`` holds ``learned@vNNNN/`` and the alias
``learned`` names the newest, and the vLLM server of ``[export.vllm] servers`` (a local server speaking
vLLM's runtime LoRA API) received exactly one ``load_lora_adapter`` call per version, with its bearer token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from learnerd.daemon.app import Daemon
from learnerd.daemon.config import config_from_dict
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.vllm_server import BASE_MODEL, vllm_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TRAINING = {"learning_rate": 1e-2, "max_steps": 4}
KEY = "vllm-key-0123456789"


async def test_each_committed_cycle_reaches_vllms_layout_and_server(tmp_path: Path, models_dir: Path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    (state / "models").symlink_to(models_dir)  # the session's built-in tiny model, built once
    monkeypatch.setenv("LEARNERD_TEST_VLLM_KEY", KEY)
    doc = qa_document(tmp_path / "docs" / "learned.dlm", QA_PAIRS[:1], training=TRAINING)
    with vllm_server(api_key=KEY) as server:
        raw = {
            "state_dir": "state",
            "docs_dirs": ["docs"],
            "training": {"num_threads": 1, "niceness": 0, "warm_spare": False},
            "export": {"vllm": {"dir": "loras", "servers": [server.url], "token_env": "LEARNERD_TEST_VLLM_KEY",
                                "base_model_name": BASE_MODEL}},
        }  # fmt: skip
        cfg = config_from_dict(raw, base=tmp_path)
        for pairs in (QA_PAIRS[:1], QA_PAIRS[:2]):
            qa_document(doc, pairs, training=TRAINING, dlm_id=read_document(doc).frontmatter.dlm_id)
            daemon = Daemon(cfg)
            try:
                summary = await daemon.run_once()
            finally:
                daemon.close()
            assert summary.changes["training"] == {"adapters_committed": 1}
        assert server.loads() == ["learned@v0001", "learned@v0002"]
        assert server.loaded["learned@v0002"] == str(tmp_path / "loras" / "learned@v0002")
    export = tmp_path / "loras"
    assert (export / "learned@v0002" / "adapter_model.safetensors").is_file()
    assert os.readlink(export / "learned") == "learned@v0002"
    assert summary.changes["vllm_export"] == {"written": 1, "loaded": 1}
