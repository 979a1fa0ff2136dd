"""Resolve and load the base model a ``.dlm`` document names in its frontmatter ``base_model``.

Accepted values (nothing is ever downloaded):

* a **built-in** name: ``learnerd/tiny-llama`` (:data:`DEFAULT_BASE_MODEL`, the tiny random Llama of
  :mod:`learnerd.ml.tiny_model` with a chat template) or ``learnerd/tiny-llama-no-chat`` (the same
  weights, no chat template); built on first use under the model cache directory;
* a **local Hugging Face model directory**: an absolute path, ``~/...``, or a path relative to the
  document's directory, holding ``config.json``, the weights (``*.safetensors`` or ``pytorch_model*.bin``)
  and a tokenizer; loaded with ``AutoModelForCausalLM`` / ``AutoTokenizer``, ``local_files_only=True``.

Anything else — a Hugging Face hub id, a dlm registry key such as ``qwen2.5-1.5b``, ``hf:org/name``, a
missing directory, a directory without a model — raises :class:`BaseModelError` with a one-line reason.

Every resolved base carries an ``identity`` string recorded in adapter metadata: for a built-in
``<name>@<16 hex of the weights' sha256>``; for a directory ``local:<absolute path>@<16 hex>`` where the
hash covers ``config.json``'s bytes and the names and sizes of the directory's files (cheap for a
multi-GB model, and it changes when the weights are replaced).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerd.ml.tiny_model import TinyModelSpec, ensure_tiny_model, read_identity

DEFAULT_BASE_MODEL = "learnerd/tiny-llama"
BUILTIN_BASE_MODELS: dict[str, TinyModelSpec] = {
    DEFAULT_BASE_MODEL: TinyModelSpec(),
    "learnerd/tiny-llama-no-chat": TinyModelSpec(chat_template=False),
}
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


class BaseModelError(ValueError):
    """The ``base_model`` cannot be used: not built-in, not a usable local directory, or failed to load."""


@dataclass(frozen=True)
class BaseModelRef:
    """A resolved base model: ``name`` as written, the ``path`` to load, its stable ``identity``."""

    name: str
    path: Path
    identity: str
    builtin: bool


@dataclass(frozen=True)
class LoadedBase:
    """A loaded base: ``model`` (float32, eval mode, on CPU) and ``tokenizer``."""

    ref: BaseModelRef
    model: Any
    tokenizer: Any


def resolve_base_model(
    name: str, *, cache_dir: str | os.PathLike[str], relative_to: str | os.PathLike[str] | None = None
) -> BaseModelRef:
    """Resolve a frontmatter ``base_model`` value without loading any weights.

    Args:
        name: the ``base_model`` string.
        cache_dir: where built-in models are built and cached (e.g. ``<state_dir>/models``).
        relative_to: directory a relative path is resolved against (the document's directory);
            the current directory when None.

    Raises:
        BaseModelError: ``name`` is neither a built-in name nor a local model directory.
    """
    if not isinstance(name, str) or not name.strip():
        raise BaseModelError("base_model is empty: name a local Hugging Face model directory or " + _builtins_hint())
    name = name.strip()
    spec = BUILTIN_BASE_MODELS.get(name)
    if spec is not None:
        path = ensure_tiny_model(cache_dir, spec)
        digest = read_identity(path)["weights_sha256"][:16]
        return BaseModelRef(name=name, path=path, identity=f"{name}@{digest}", builtin=True)
    if name.startswith("hf:"):
        raise BaseModelError(f"base_model {name!r}: learnerd never downloads models; {_local_hint()}")
    path = Path(os.path.expanduser(name))
    if not path.is_absolute():
        path = Path(relative_to or Path.cwd()) / path
    path = path.resolve()
    if not path.exists():
        raise BaseModelError(
            f"base_model {name!r} is not a built-in model and no directory {path} exists "
            f"(a Hugging Face hub id or dlm registry key is not downloaded; {_local_hint()})"
        )
    if not path.is_dir():
        raise BaseModelError(f"base_model {name!r}: {path} is not a directory; {_local_hint()}")
    if not (path / "config.json").is_file():
        raise BaseModelError(f"base_model {name!r}: {path} has no config.json, so it is not a Hugging Face model")
    if not any(any(path.glob(p)) for p in _WEIGHT_PATTERNS):
        raise BaseModelError(f"base_model {name!r}: {path} has no weights (*.safetensors or pytorch_model*.bin)")
    return BaseModelRef(name=name, path=path, identity=f"local:{path}@{_directory_fingerprint(path)}", builtin=False)


def load_base_model(ref: BaseModelRef) -> LoadedBase:
    """Load ``ref``'s model and tokenizer offline (float32, eval mode, no remote code).

    Raises:
        BaseModelError: transformers cannot load the directory (unsupported architecture, corrupt
            files, missing tokenizer); the message names the directory and transformers' reason.
    """
    model, tokenizer = load_model_directory(ref.path, name=ref.name)
    return LoadedBase(ref=ref, model=model, tokenizer=tokenizer)


def load_model_directory(path: str | os.PathLike[str], name: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a Hugging Face model directory, offline, float32, eval mode.

    Raises:
        BaseModelError: transformers cannot load it (``name`` labels the message; default the path).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, trust_remote_code=False, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BaseModelError(f"base_model {name or str(path)!r}: cannot load {path}: {reason}") from exc
    return model.eval(), tokenizer


def load_base(
    name: str, *, cache_dir: str | os.PathLike[str], relative_to: str | os.PathLike[str] | None = None
) -> LoadedBase:
    """:func:`resolve_base_model` then :func:`load_base_model`. Raises :class:`BaseModelError`."""
    return load_base_model(resolve_base_model(name, cache_dir=cache_dir, relative_to=relative_to))


def _directory_fingerprint(path: Path) -> str:
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for entry in sorted(path.iterdir()):
        if entry.is_file():
            digest.update(f"\0{entry.name}\0{entry.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def _builtins_hint() -> str:
    return "a built-in model (" + ", ".join(sorted(BUILTIN_BASE_MODELS)) + ")"


def _local_hint() -> str:
    return "download the model yourself and set base_model to its directory, or use " + _builtins_hint()
