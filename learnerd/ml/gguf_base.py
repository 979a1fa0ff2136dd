"""A Llama-architecture Hugging Face model directory as a GGUF model file for llama.cpp (``llama-server -m``,
``llama_cpp.Llama(model_path=…)``), written once per base into the model cache.

Format (read from llama.cpp's ``convert_hf_to_gguf.py`` and ``src/llama-vocab.cpp`` to learn it, written with
the ``gguf`` library): ``general.architecture = "llama"``, ``general.type = "model"``, the hyperparameters
``llama.context_length`` (``max_position_embeddings``), ``embedding_length`` (``hidden_size``), ``block_count``,
``feed_forward_length``, ``attention.head_count``, ``attention.head_count_kv``,
``attention.layer_norm_rms_epsilon``, ``rope.freq_base`` (``rope_theta``), ``rope.dimension_count`` (the head
dimension), ``vocab_size``; each weight under the ``gguf`` library's tensor name for it
(``model.layers.0.self_attn.q_proj.weight`` → ``blk.0.attn_q.weight``), with ``q_proj`` / ``k_proj`` rows in
llama.cpp's rotary order (:func:`~learnerd.ml.gguf_lora.permute_rotary_rows`, per query / key-value head), no
``output.weight`` when the embeddings are tied; 2-D weights in the out type (float16 by default, float32 on
request), 1-D weights (the RMS norms) in float32, as llama.cpp's converter does.

Tokenizer: a GPT-2 style byte-level BPE (``tokenizer.json`` with a ``BPE`` model, merges and a ``ByteLevel``
decoder) as ``tokenizer.ggml.model = "gpt2"``: the tokens in id order (ids the vocabulary lacks up to
``vocab_size`` as ``[PAD<id>]``), their types (``CONTROL`` for the special added tokens, ``USER_DEFINED`` for
other added tokens, ``NORMAL`` otherwise: llama.cpp parses only control tokens as specials), the merges, the
bos / eos / unk / pad ids and the chat template (``gguf.SpecialVocab``), and whether the tokenizer adds a BOS /
EOS token, read from what it does to a text.

``tokenizer.ggml.pre`` names the pre-tokenizer llama.cpp applies before BPE. llama.cpp's converter picks it by a
hash of the tokenizer's output on a fixed text; a file without it makes llama.cpp warn "missing pre-tokenizer
type, using: 'default'" and split text with a four-regex rule no Hugging Face tokenizer uses (degraded
generation), and an unknown name is an error at load. learnerd names it from the ``pre_tokenizer`` of
``tokenizer.json`` (:data:`PRE_TOKENIZERS`): a byte-level split with GPT-2's regex is ``gpt-2``; the digits
split first (SmolLM's own ``tokenizer.json``) is ``smollm``. Any other pre-tokenizer is refused, never guessed.

Refused with the reason (:class:`GGUFBaseError`): not ``LlamaForCausalLM`` / ``model_type == "llama"``, rope
scaling, attention or MLP biases, a tokenizer that is not a byte-level BPE with merges (the built-in tiny
models have none), an unrecognised pre-tokenizer, a weight without a GGUF name.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learnerd.ml.gguf_lora import LLAMA_ARCHITECTURES, permute_rotary_rows, source_gguf
from learnerd.ml.loader import loading
from learnerd.store.atomic import fsync_dir

CONVERTER_VERSION = 1
"""Bumped whenever the converter would write a different file for the same directory."""
BASE_CACHE = "gguf-base"
"""The directory under the model cache holding converted bases."""
OUTTYPES = ("f16", "f32")
PRE_TOKENIZERS: tuple[tuple[dict[str, Any], str], ...] = (
    ({"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}, "gpt-2"),
    (
        {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            ],
        },
        "smollm",
    ),
)
"""``tokenizer.json`` pre-tokenizers (``trim_offsets`` aside: it moves offsets, not ids) and llama.cpp's name for
each (``llama-vocab.cpp``: ``gpt-2`` splits with GPT-2's regex, ``smollm`` splits every digit off first, then
GPT-2's regex)."""


class GGUFBaseError(ValueError):
    """The base model directory cannot be converted to GGUF (the message says why); nothing was written."""


def base_gguf_file(base_model: str, model_dir: Path, identity: str, relative_to: Path, cache_dir: Path) -> Path:
    """The GGUF file llama.cpp should load for a resolved base (``base_model`` as written, resolved against
    ``relative_to`` to the directory ``model_dir`` of identity ``identity``): the file it came from
    (:func:`~learnerd.ml.gguf_lora.source_gguf`), else its float16 conversion in the model cache ``cache_dir``
    (:func:`ensure_base_gguf`).

    Raises:
        GGUFBaseError: the base came from no GGUF file and cannot be converted (the reason).
        OSError: the model cache cannot be written.
    """
    source = source_gguf(base_model, model_dir, relative_to)
    return source if source is not None else ensure_base_gguf(model_dir, identity, cache_dir)


def ensure_base_gguf(model_dir: Path, identity: str, cache_dir: str | os.PathLike[str], outtype: str = "f16") -> Path:
    """``<cache_dir>/gguf-base/<16 hex>.<outtype>.gguf``, the conversion of ``model_dir`` (the hex: sha256 of the
    base's ``identity`` — :attr:`~learnerd.ml.base_model.BaseModelRef.identity` — and :data:`CONVERTER_VERSION`),
    written first if missing: in a temporary file beside it, fsynced and renamed into place, under the process's
    model-loading lock (:func:`learnerd.ml.loader.loading`), so a crash leaves no half-written file at the name.

    Args:
        outtype: ``"f16"`` or ``"f32"`` (:func:`write_base_gguf`).

    Raises:
        GGUFBaseError: the directory cannot be converted (see the module docstring).
        ValueError: ``outtype`` is neither.
        OSError: the cache cannot be written.
    """
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r} is not one of {OUTTYPES}")
    key = hashlib.sha256(f"{identity}\0{CONVERTER_VERSION}".encode()).hexdigest()[:16]
    target = Path(cache_dir) / BASE_CACHE / f"{key}.{outtype}.gguf"
    if target.is_file():
        return target
    check_convertible(model_dir)  # refuse before taking the lock
    with loading():
        if not target.is_file():  # else another thread converted it while this one waited
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            try:
                write_base_gguf(model_dir, Path(tmp), outtype)
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            finally:
                Path(tmp).unlink(missing_ok=True)
            fsync_dir(target.parent)
    return target


def check_convertible(model_dir: Path) -> tuple[dict[str, Any], str]:
    """``(config.json, llama.cpp's pre-tokenizer name)`` of a directory this module converts.

    Raises:
        GGUFBaseError: it is not one (the reason; see the module docstring).
    """
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GGUFBaseError(f"cannot read {model_dir / 'config.json'}: {exc}") from exc
    architectures = config.get("architectures") or []
    if config.get("model_type") != "llama" or not LLAMA_ARCHITECTURES.intersection(architectures):
        raise GGUFBaseError(
            f"only Llama models (LlamaForCausalLM) are converted to GGUF, not {config.get('model_type')!r} "
            f"{architectures}"
        )
    for rope in (config.get("rope_parameters") or {}, config.get("rope_scaling") or {}):
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise GGUFBaseError(f"rope scaling {kind!r} is not converted")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise GGUFBaseError("attention or MLP biases are not converted")
    try:
        tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GGUFBaseError(f"no readable tokenizer.json in {model_dir}: {exc}") from exc
    model = tokenizer.get("model") or {}
    decoder = (tokenizer.get("decoder") or {}).get("type")
    if model.get("type") != "BPE" or model.get("byte_fallback") or decoder != "ByteLevel":
        raise GGUFBaseError("the tokenizer is not a GPT-2 style byte-level BPE (llama.cpp's 'gpt2' tokenizer model)")
    if not model.get("merges"):
        raise GGUFBaseError("the tokenizer has no BPE merges, so llama.cpp's BPE would not merge its bytes")
    return config, llama_pre_tokenizer(tokenizer.get("pre_tokenizer"))


def llama_pre_tokenizer(pre_tokenizer: Mapping[str, Any] | None) -> str:
    """llama.cpp's ``tokenizer.ggml.pre`` name for a ``tokenizer.json`` ``pre_tokenizer`` (:data:`PRE_TOKENIZERS`).

    Raises:
        GGUFBaseError: none is known to split text the same way.
    """
    shape = _without_offsets(pre_tokenizer)
    for known, name in PRE_TOKENIZERS:
        if shape == known:
            return name
    raise GGUFBaseError(
        f"llama.cpp has no pre-tokenizer known to split text as {json.dumps(pre_tokenizer)} does "
        "(without one it would fall back to its 'default' rule and tokenize differently)"
    )


def _without_offsets(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_offsets(v) for k, v in value.items() if k != "trim_offsets"}
    if isinstance(value, list):
        return [_without_offsets(v) for v in value]
    return value


def write_base_gguf(model_dir: Path, target: Path, outtype: str = "f16") -> None:
    """Write the model directory ``model_dir`` as the GGUF model file ``target`` (replaced; not atomic by itself:
    :func:`ensure_base_gguf` writes a temporary file and renames it).

    Args:
        outtype: ``"f16"`` (2-D weights as float16, ``general.file_type`` 1) or ``"f32"`` (all float32, 0).

    Raises:
        GGUFBaseError: the directory cannot be converted (see the module docstring).
        OSError: a file cannot be read or written.
    """
    import gguf

    config, pre = check_convertible(model_dir)
    dtype = np.float16 if outtype == "f16" else np.float32
    n_head = int(config["num_attention_heads"])
    n_kv_head = int(config.get("num_key_value_heads") or n_head)
    n_blocks = int(config["num_hidden_layers"])
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // n_head)
    rope = config.get("rope_parameters") or {}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_blocks)

    writer = gguf.GGUFWriter(os.fspath(target), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(model_dir.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_blocks)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv_head)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_rope_dimension_count(head_dim)
    if head_dim != hidden // n_head:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, model_dir, pre, int(config["vocab_size"]))

    tied = bool(config.get("tie_word_embeddings"))
    for key, tensor in _weights(model_dir):
        if key.endswith("rotary_emb.inv_freq") or (tied and key == "lm_head.weight"):
            continue  # recomputed by llama.cpp / the tied embedding serves as output
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFBaseError(f"no GGUF tensor name for the weight {key!r}")
        if key.endswith("self_attn.q_proj.weight"):
            tensor = permute_rotary_rows(tensor, n_head)
        elif key.endswith("self_attn.k_proj.weight"):
            tensor = permute_rotary_rows(tensor, n_kv_head)
        writer.add_tensor(name, np.ascontiguousarray(tensor, dtype=dtype if tensor.ndim > 1 else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_tokenizer(writer: Any, model_dir: Path, pre: str, vocab_size: int) -> None:
    """The ``tokenizer.ggml.*`` keys and the chat template (see the module docstring)."""
    import gguf
    from tokenizers import Tokenizer

    tokenizer_json = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    try:
        vocab = gguf.vocab.BpeVocab(model_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise GGUFBaseError(f"cannot read the BPE vocabulary of {model_dir}: {exc}") from exc
    by_id = {i: text for text, i in {**vocab.vocab, **vocab.added_tokens_dict}.items()}
    added = {entry["id"]: bool(entry.get("special")) for entry in tokenizer_json.get("added_tokens") or []}
    size = max(vocab_size, len(by_id))
    tokens, types = [], []
    for i in range(size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.USER_DEFINED)
            continue
        tokens.append(by_id[i])
        types.append(
            gguf.TokenType.NORMAL if i not in added
            else gguf.TokenType.CONTROL if added[i] else gguf.TokenType.USER_DEFINED
        )  # fmt: skip
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=size)
    backend = Tokenizer.from_file(os.fspath(model_dir / "tokenizer.json"))
    plain, full = backend.encode("a", add_special_tokens=False).ids, backend.encode("a").ids
    start = next(p for p in range(len(full) - len(plain) + 1) if full[p : p + len(plain)] == plain)
    special.add_special_token["bos"] = start > 0
    special.add_special_token["eos"] = len(full) > start + len(plain)
    special.add_to_gguf(writer, quiet=True)


def _weights(model_dir: Path) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, float32 array)`` of every weight in the directory's ``*.safetensors`` (else ``pytorch_model*.bin``)
    files, one at a time (bfloat16 and float16 widened through torch)."""
    import torch

    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        from safetensors import safe_open

        for path in files:
            with safe_open(os.fspath(path), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                    yield key, f.get_tensor(key).to(torch.float32).numpy()
        return
    for path in sorted(model_dir.glob("pytorch_model*.bin")):
        for key, value in torch.load(path, map_location="cpu", weights_only=True).items():
            yield key, value.to(torch.float32).numpy()
