"""An adapter version as vLLM loads it: the directory of :mod:`learnerd.store.export_layout`'s entries in
``[export.vllm] dir`` (``<dir>/<name>@vNNNN/``, the alias ``<dir>/<name>``).

Source of the format: vLLM's filesystem LoRA resolver (``vllm/plugins/lora_resolvers/filesystem_resolver.py``,
enabled with ``VLLM_LORA_RESOLVER_CACHE_DIR=<dir>``) loads ``<dir>/<model>/`` the first time a request names
``<model>``, if its ``adapter_config.json`` has ``peft_type == "LORA"`` and ``base_model_name_or_path`` equal
to the served base model's name; vLLM's LoRA loader (``vllm/lora/peft_helper.py``) then reads ``r``,
``lora_alpha``, ``target_modules``, ``bias``, ``modules_to_save``, ``use_dora`` and ``use_rslora`` from it
and the tensors from ``adapter_model.safetensors`` (peft's own file names and tensor names).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from learnerd.store.adapters import AdapterVersion
from learnerd.store.export_layout import ExportRefused

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


def vllm_adapter_config(version: AdapterVersion, base_model_name: str | None) -> dict:
    """The version's ``adapter_config.json`` as vLLM reads it: peft's own, with ``base_model_name_or_path``
    set to ``base_model_name`` (the base's name on the vLLM servers) when given.

    Raises:
        ExportRefused: the adapter is not a plain LoRA vLLM loads (``peft_type`` not ``LORA``, ``use_dora``,
            ``bias`` other than ``"none"``, ``modules_to_save``: vLLM's ``PEFTHelper`` refuses them).
        OSError, ValueError: the version's config is missing or not JSON.
    """
    config = json.loads((version.path / CONFIG_FILE).read_text())
    problems = [
        what
        for what, bad in (
            (f"peft_type {config.get('peft_type')!r} (vLLM loads LORA)", config.get("peft_type") != "LORA"),
            ("DoRA (use_dora)", bool(config.get("use_dora"))),
            (f"bias {config.get('bias')!r}", config.get("bias", "none") != "none"),
            ("modules_to_save", bool(config.get("modules_to_save"))),
        )
        if bad
    ]
    if problems:
        raise ExportRefused(f"vLLM cannot load {version.doc_key} {version.name}: " + ", ".join(problems))
    if base_model_name:
        config["base_model_name_or_path"] = base_model_name
    return config


def vllm_adapter_writer(version: AdapterVersion, base_model_name: str | None) -> Callable[[Path], None]:
    """The ``write`` of :func:`~learnerd.store.export_layout.publish` for vLLM: a directory holding
    :func:`vllm_adapter_config`'s ``adapter_config.json`` and a copy of ``adapter_model.safetensors``,
    readable by a vLLM server running as another user (0755 / 0644)."""

    def write(target: Path) -> None:
        config = vllm_adapter_config(version, base_model_name)
        target.mkdir(mode=0o755)
        target.chmod(0o755)  # whatever the umask (learnerd's own is 077)
        (target / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(version.path / WEIGHTS_FILE, target / WEIGHTS_FILE)
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            (target / name).chmod(0o644)

    return write
