"""The built-in tiny Llama: deterministic, offline, with (and without) a chat template."""

from __future__ import annotations

import json
import threading

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from learnerd.ml.tiny_model import (
    EOS,
    EOT,
    IDENTITY_FILE,
    TinyModelSpec,
    build_model,
    build_tokenizer,
    ensure_tiny_model,
    weights_sha256,
)


def test_same_weights_every_build(tiny_model_dir, tmp_path):
    spec = TinyModelSpec()
    rebuilt = build_model(spec, build_tokenizer())
    recorded = json.loads((tiny_model_dir / IDENTITY_FILE).read_text())["weights_sha256"]
    assert weights_sha256(rebuilt) == recorded
    assert weights_sha256(build_model(TinyModelSpec(seed=1), build_tokenizer())) != recorded
    # A second cache directory, built independently, holds byte-identical weights.
    other = ensure_tiny_model(tmp_path / "cache")
    assert (other / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()


def test_loads_offline_and_generates_through_the_chat_template(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    assert model.config.model_type == "llama" and model.config.vocab_size == len(tokenizer) == 256 + 6
    assert weights_sha256(model) == json.loads((tiny_model_dir / IDENTITY_FILE).read_text())["weights_sha256"]
    assert sorted(model.generation_config.eos_token_id) == sorted(tokenizer.convert_tokens_to_ids([EOS, EOT]))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi ☃"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi ☃<|eot_id|>" + (
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer("é", add_special_tokens=False)["input_ids"] == list("é".encode())  # one token per byte
    out = model.generate(torch.tensor([ids]), max_new_tokens=5, do_sample=False)
    assert out.shape[1] <= len(ids) + 5


def test_no_chat_template_variant(tmp_path):
    directory = ensure_tiny_model(tmp_path, TinyModelSpec(chat_template=False))
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    assert not tokenizer.chat_template
    assert directory != ensure_tiny_model(tmp_path)


def test_concurrent_builds_leave_one_complete_directory(tmp_path):
    results = []
    threads = [threading.Thread(target=lambda: results.append(ensure_tiny_model(tmp_path))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and (results[0] / IDENTITY_FILE).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]  # no temporary build left behind
