"""learnerd's built-in base model: a deterministic, randomly initialised tiny Llama with a byte-level
tokenizer and a chat template, built locally (no download) and cached on disk.

It is what Hugging Face's own tests use a tiny random model for: something every code path (LoRA
training, adapters, probes, evaluation, steering) can run against on a laptop CPU in seconds. It knows
nothing; whatever it answers after training, an adapter taught it.

* **Tokenizer**: one token per byte (ids 0–255 are the byte values, GPT-2's byte-to-unicode mapping
  inside the ``tokenizers`` BPE model, no merges) plus the special tokens of :data:`SPECIAL_TOKENS`
  (ids 256…). Encoding adds ``<|begin_of_text|>`` in front, like Llama's tokenizer. ``eos_token`` is
  ``<|end_of_text|>``; a chat turn ends with ``<|eot_id|>``; the generation config stops at either.
* **Chat template** (Llama-3's layout, Jinja)::

      <|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nQ<|eot_id|><|start_header_id|>assistant...

* **Weights**: every tensor is drawn from its own ``torch.Generator`` seeded from (``spec.seed``, tensor
  name): normal(0, ``initializer_range``) for matrices, ones for RMSNorm weights. The result depends on
  nothing but the spec and torch's CPU normal sampler, so the same weights come out on every machine and
  do not change when transformers changes its own initialisation.

The built directory is an ordinary Hugging Face model directory (``config.json``, ``model.safetensors``,
``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``) that
``AutoModelForCausalLM`` / ``AutoTokenizer`` load offline. :func:`ensure_tiny_model` caches it under
``<cache_dir>/tiny-llama-<key>`` where ``key`` hashes the spec and :data:`BUILDER_VERSION`, building into a
temporary directory renamed into place, so concurrent processes never see a half-built model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerd.ml.loader import loading
from learnerd.store.atomic import publish_directory

BUILDER_VERSION = 1
"""Bumped whenever the builder would produce different files for the same spec (new cache key)."""

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
PAD = "<|pad|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS, EOS, EOT, PAD, START_HEADER, END_HEADER)
"""The special tokens, in id order starting at 256 (after the 256 byte tokens)."""

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
"""Llama-3's chat layout over the tiny tokenizer's special tokens."""

IDENTITY_FILE = "learnerd-base.json"
"""Written into the built directory: the spec and a sha256 of the weights (the model's identity)."""


@dataclass(frozen=True)
class TinyModelSpec:
    """The builder's parameters; equal specs give byte-identical weights.

    The defaults are sized so a LoRA adapter memorises a few dozen short Q/A pairs in a few seconds of
    CPU (``tests/integration/test_training_lora.py``): 2 layers of width 128 are enough capacity
    for rank-8 LoRA on every linear layer, and ``initializer_range`` 0.1 (instead of Llama's 0.02)
    gives the frozen, random output projection logits large enough that a trained hidden state can
    make its answer token clearly the most likely one.
    """

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 1024
    initializer_range: float = 0.1
    seed: int = 0
    chat_template: bool = True

    def cache_key(self) -> str:
        """16 hex digits of sha256 over the spec's fields and :data:`BUILDER_VERSION`."""
        payload = json.dumps({"builder": BUILDER_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def build_tokenizer(chat_template: bool = True, model_max_length: int = TinyModelSpec.max_position_embeddings) -> Any:
    """The byte-level tokenizer as a ``transformers.PreTrainedTokenizerFast`` (vocabulary 256 + 6).

    Args:
        chat_template: attach :data:`CHAT_TEMPLATE`; False leaves the tokenizer without one.
        model_max_length: the longest sequence (tokens) the model takes.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_chars = bytes_to_unicode()
    backend = Tokenizer(models.BPE(vocab={byte_chars[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, backend.token_to_id(BOS))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens=[EOT, START_HEADER, END_HEADER],
        model_max_length=model_max_length,
    )
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(spec: TinyModelSpec, tokenizer: Any) -> Any:
    """A ``LlamaForCausalLM`` of ``spec``'s shape with deterministic weights (float32, eval mode)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos_ids = [tokenizer.convert_tokens_to_ids(EOS), tokenizer.convert_tokens_to_ids(EOT)]
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            if name.endswith("norm.weight"):
                tensor.fill_(1.0)
                continue
            seed = int.from_bytes(hashlib.sha256(f"{spec.seed}:{name}".encode()).digest()[:8], "little")
            generator = torch.Generator().manual_seed(seed)
            tensor.copy_(torch.randn(tensor.shape, generator=generator) * spec.initializer_range)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    return model.eval()


def weights_sha256(model: Any) -> str:
    """sha256 hex of the state dict: names in sorted order, each tensor's dtype, shape and raw bytes."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def ensure_tiny_model(cache_dir: str | os.PathLike[str], spec: TinyModelSpec | None = None) -> Path:
    """The directory of the tiny model for ``spec`` under ``cache_dir``, built there first if missing.

    Safe against concurrent callers — in this process the build holds the model-loading lock
    (:func:`learnerd.ml.loader.loading`: a waiting thread finds the model built); across processes each
    builds in its own temporary directory, the first rename wins and the others discard theirs — and
    against crashes (a half-built temporary directory is never at the final name; stale ones older than an
    hour are removed by the next call).

    Returns:
        ``<cache_dir>/tiny-llama-<spec.cache_key()>``, loadable with ``from_pretrained(local_files_only=True)``.

    Raises:
        OSError: ``cache_dir`` cannot be created or written.
    """
    spec = spec or TinyModelSpec()
    cache = Path(cache_dir)
    target = cache / f"tiny-llama-{spec.cache_key()}"
    if (target / IDENTITY_FILE).is_file():
        return target
    with loading():
        if not (target / IDENTITY_FILE).is_file():  # else another thread built it while this one waited
            _build(spec, cache, target)
    return target


def _build(spec: TinyModelSpec, cache: Path, target: Path) -> None:
    """Build ``spec``'s model in a staging directory under ``cache`` and publish it as ``target``."""
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(cache)
    from transformers.utils import logging as hf_logging

    staging = Path(tempfile.mkdtemp(prefix=".build-tiny-llama-", dir=cache))
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = build_tokenizer(spec.chat_template, spec.max_position_embeddings)
        model = build_model(spec, tokenizer)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        identity = {
            "spec": dataclasses.asdict(spec),
            "builder": BUILDER_VERSION,
            "weights_sha256": weights_sha256(model),
        }
        publish_directory(staging, target, IDENTITY_FILE, identity)
    finally:
        if progress_bars:
            hf_logging.enable_progress_bar()
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


class IdentityError(ValueError):
    """A model directory's :data:`IDENTITY_FILE` cannot be trusted (the one-line reason)."""


def read_identity(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The :data:`IDENTITY_FILE` of a built model directory (the tiny model's: spec, builder,
    weights_sha256; a converted GGUF's: gguf_sha256, weights_sha256, ...).

    Raises:
        IdentityError: the file is unreadable, not UTF-8 JSON, not an object, or its ``weights_sha256`` is
            not 64 lowercase hex digits.
    """
    path = Path(model_dir) / IDENTITY_FILE
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise IdentityError(f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if not isinstance(identity, dict):
        raise IdentityError(f"{path}: a JSON {type(identity).__name__}, not an object")
    digest = identity.get("weights_sha256")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise IdentityError(f"{path}: weights_sha256 is not a sha256 hex digest")
    return identity


def _remove_stale_builds(cache: Path, max_age_s: float = 3600.0) -> None:
    import time

    now = time.time()
    for path in cache.glob(".build-tiny-llama-*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > max_age_s:
                shutil.rmtree(path, ignore_errors=True)
