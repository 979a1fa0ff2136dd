"""vLLM's LoRA resolver layout: one directory per exported adapter version, and a stable alias per document.

Layout of the export directory (``<name>``: the document's served-model name, its file name without
``.dlm``)::

    <dir>/
        <name>@v0003/                 adapter_config.json, adapter_model.safetensors
        <name>@v0004/
        <name> -> <name>@v0004        the alias: a relative symbolic link, replaced by rename(2)
        .staging-<name>@v0005-k3j2/   a version (or the new alias) being written: removed at the next publish
        .dropped-<name>@v0001-x9q1/   a version being removed (likewise)

Source of the format: vLLM's filesystem LoRA resolver (``vllm/plugins/lora_resolvers/filesystem_resolver.py``,
enabled with ``VLLM_LORA_RESOLVER_CACHE_DIR=<dir>``) loads ``<dir>/<model>/`` the first time a request names
``<model>``, if its ``adapter_config.json`` has ``peft_type == "LORA"`` and ``base_model_name_or_path`` equal
to the served base model's name; vLLM's LoRA loader (``vllm/lora/peft_helper.py``) then reads ``r``,
``lora_alpha``, ``target_modules``, ``bias``, ``modules_to_save``, ``use_dora`` and ``use_rslora`` from it
and the tensors from ``adapter_model.safetensors`` (peft's own file names and tensor names).

Crash safety: a version is written into a ``.staging-*`` directory, fsynced, and renamed to ``<name>@vNNNN``
(rename(2) is atomic), so a version directory exists only complete; the alias is a new symbolic link
renamed over the old one, so it names the old or the new version, never nothing; a dropped version is
renamed to ``.dropped-*`` before it is deleted. A crash at any point leaves the previous export intact.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from learnerd.store.adapters import AdapterVersion
from learnerd.store.atomic import fsync_dir, fsync_tree

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_STAGING = ".staging-"
_DROPPED = ".dropped-"


class ExportRefused(Exception):
    """An adapter vLLM cannot load (DoRA, trained biases, modules_to_save), or a name the layout cannot hold."""


@dataclass(frozen=True)
class Published:
    """What :func:`publish` did: ``name`` the versioned name now aliased (``<name>@vNNNN``), ``written``
    whether its directory was written now (False: it was already there), ``kept`` the versioned names left
    in the directory (oldest first), ``dropped`` the ones removed."""

    name: str
    written: bool
    kept: tuple[str, ...]
    dropped: tuple[str, ...]


def versioned_name(name: str, number: int) -> str:
    """``<name>@vNNNN``: the directory and the name vLLM serves the version under, e.g. ``learned@v0002``."""
    return f"{name}@v{number:04d}"


def exported_versions(directory: Path, name: str) -> dict[int, str]:
    """Version number → versioned name of every complete ``<name>@vNNNN`` directory in ``directory``."""
    pattern = re.compile(re.escape(name) + r"@v(\d{4,})")
    found = {}
    for entry in directory.iterdir() if directory.is_dir() else ():
        match = pattern.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            found[int(match.group(1))] = entry.name
    return dict(sorted(found.items()))


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


def publish(
    directory: Path, name: str, version: AdapterVersion, keep: int, base_model_name: str | None = None
) -> Published:
    """Export ``version`` as ``<directory>/<name>@vNNNN/``, point the alias ``<directory>/<name>`` at it, and
    keep ``keep`` versions of ``name`` (this one and the newest others); idempotent.

    Args:
        directory: the export directory (created when missing).
        name: the document's served-model name (no ``/``, not starting with ``.``, no ``@``).
        version: the committed adapter version to export.
        keep: how many versioned directories of ``name`` to keep (at least 1).
        base_model_name: written as ``base_model_name_or_path`` (see :func:`vllm_adapter_config`).

    Raises:
        ExportRefused: a bad name, an adapter vLLM cannot load, or ``<directory>/<name>`` is not a symbolic
            link (something else is there: left alone).
        OSError: the directory cannot be written; what was exported before is intact.
    """
    if not name or "/" in name or "@" in name or name.startswith("."):
        raise ExportRefused(f"{name!r} cannot name an exported adapter (no '/', '@' or leading '.')")
    alias = directory / name
    if os.path.lexists(alias) and not alias.is_symlink():
        raise ExportRefused(f"{alias} exists and is not the alias learnerd writes (a symbolic link); left alone")
    directory.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(directory, name)
    target = versioned_name(name, version.number)
    written = not (directory / target).is_dir()
    if written:
        _write_version(directory, target, version, base_model_name)
    if not alias.is_symlink() or os.readlink(alias) != target:
        link = directory / f"{_STAGING}{name}@alias-{os.getpid()}"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        os.replace(link, alias)
        fsync_dir(directory)
    versions = exported_versions(directory, name)
    others = [n for n in versions if n != version.number]
    kept_numbers = sorted([version.number, *(others[-(keep - 1) :] if keep > 1 else [])])
    dropped = [versions[n] for n in others if n not in kept_numbers]
    for old in dropped:
        aside = Path(tempfile.mkdtemp(prefix=f"{_DROPPED}{old}-", dir=directory))
        os.replace(directory / old, aside / old)
        fsync_dir(directory)
        shutil.rmtree(aside, ignore_errors=True)
    return Published(target, written, tuple(versions[n] for n in kept_numbers), tuple(dropped))


def _write_version(directory: Path, target: str, version: AdapterVersion, base_model_name: str | None) -> None:
    config = vllm_adapter_config(version, base_model_name)
    staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{target}-", dir=directory))
    try:
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(version.path / WEIGHTS_FILE, staging / WEIGHTS_FILE)
        staging.chmod(0o755)  # a vLLM server running as another user reads it
        fsync_tree(staging)
        os.rename(staging, directory / target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(directory)


def _remove_leftovers(directory: Path, name: str) -> None:
    """Staging and dropped directories of ``name`` left by a crash (its key is exported by one worker at once)."""
    for prefix in (_STAGING, _DROPPED):
        for entry in directory.glob(f"{prefix}{glob.escape(name)}@*"):
            if entry.is_symlink() or entry.is_file():
                entry.unlink(missing_ok=True)
            else:
                shutil.rmtree(entry, ignore_errors=True)
