"""What the generation commands share: a document's base model with its adapter, and a steering file.

A document's adapters live in the adapter store under its ``dlm_id`` (the ULID in its frontmatter, the
key dlm's own store uses), unless ``--doc-key`` names another key.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError

if TYPE_CHECKING:
    from learnerd.daemon.config import Config


@dataclass(frozen=True)
class DocumentModel:
    """A document, its doc key, the loaded base, and ``model``: the base with ``adapter`` applied
    (``adapter`` is None when the document has none or ``--adapter none`` was given)."""

    document: Any
    doc_key: str
    base: Any
    model: Any
    adapter: Any

    @property
    def tokenizer(self) -> Any:
        return self.base.tokenizer

    def describe(self) -> dict[str, Any]:
        """JSON values naming the model: base identity and adapter version."""
        return {
            "base_model_identity": self.base.ref.identity,
            "adapter": self.adapter.name if self.adapter is not None else None,
        }


def add_generation_options(parser: argparse.ArgumentParser, steering: bool = True) -> None:
    """``--adapter``, ``--doc-key`` and ``--device`` (and ``--steering`` unless ``steering`` is False)."""
    parser.add_argument(
        "--adapter",
        default="current",
        metavar="REF",
        help="adapter version: current (default; none if the document has no adapter yet), vN, or none",
    )
    parser.add_argument("--doc-key", metavar="KEY", help="the document's key in the adapter store (default: dlm_id)")
    parser.add_argument(
        "--device", default="auto", help="auto (CUDA when there is a GPU, else CPU; default), cpu, cuda or cuda:N"
    )
    if steering:
        parser.add_argument(
            "--steering", metavar="PATH", type=Path, help="steering file (deltas_best.json of `learnerd evolve`)"
        )


def read_dlm(doc: Path) -> Any:
    """The parsed document at ``doc``. Raises :class:`CommandError` when it is unreadable or malformed."""
    from learnerd.store.dlm import DocumentError, read_document

    try:
        return read_document(doc)
    except DocumentError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"{doc}: {exc.strerror or exc}") from None


def load_document_model(
    cfg: Config, document: Any, adapter: str = "current", doc_key: str | None = None, device: str = "auto"
) -> DocumentModel:
    """Load ``document``'s base model (see :mod:`learnerd.ml.base_model`) onto ``device`` and the adapter
    ``adapter`` names, offline.

    Raises:
        CommandError: the base model or device is unusable, the adapter missing or trained on another base,
            or the loaded model failed its known-answer check (:func:`learnerd.ml.loader.check_model`).
    """
    from transformers.utils import logging as hf_logging

    from learnerd.fleet.ledger import adapter_store
    from learnerd.ml.base_model import BaseModelError, load_base
    from learnerd.ml.device import DeviceError, resolve_device
    from learnerd.ml.loader import ModelCheckError, load_adapter
    from learnerd.store import db
    from learnerd.store.adapters import AdapterStoreError

    key = doc_key or document.frontmatter.dlm_id
    hf_logging.disable_progress_bar()  # "Loading weights" bars would interleave with the command's output
    try:
        placement = resolve_device(device)
        base = load_base(
            document.frontmatter.base_model,
            cache_dir=cfg.layout.models_dir,
            relative_to=document.path.parent,
            placement=placement,
        )
    except (BaseModelError, DeviceError, ModelCheckError) as exc:
        raise CommandError(f"{document.path}: {exc}") from None
    store = adapter_store(cfg)
    try:
        if adapter == "none":
            version = None
        elif adapter == "current":
            version = store.current(key)
        else:
            version = store.resolve(key, adapter)
        if version is not None and version.metadata().base_model_identity != base.ref.identity:
            raise CommandError(
                f"adapter {version.name} of {key} was trained on {version.metadata().base_model_identity}, "
                f"not on this document's base {base.ref.identity}"
            )
    except (AdapterStoreError, db.StoreUnavailable, db.SchemaError) as exc:
        raise CommandError(str(exc)) from None
    model = base.model
    if version is not None:
        try:
            model = load_adapter(base.model, version)
        except ModelCheckError as exc:
            raise CommandError(f"{document.path}: adapter {version.name}: {exc}") from None
    return DocumentModel(document=document, doc_key=key, base=base, model=model, adapter=version)


def load_steering_processor(path: Path, tokenizer: Any) -> Any:
    """The :class:`~learnerd.steering.processor.ClusterBiasProcessor` of a steering file for ``tokenizer``.

    Raises:
        CommandError: the file is malformed or made for another tokenizer.
    """
    from learnerd.steering.processor import SteeringError, load_steering

    try:
        return load_steering(path, tokenizer)
    except SteeringError as exc:
        raise CommandError(str(exc)) from None
