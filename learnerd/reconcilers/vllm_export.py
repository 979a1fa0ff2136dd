"""The vLLM export reconciler: ``[export.vllm] dir`` holds each document's adapter versions in vLLM's LoRA
resolver layout (:mod:`learnerd.store.vllm_layout`), and ``[export.vllm] servers`` have them loaded.

Key: a document path. Level-triggered: ``reconcile(path)`` reads the document's current adapter version and
publishes it as ``<dir>/<name>@vNNNN/`` (``<name>``: the document's served-model name, its file name without
``.dlm``; :mod:`learnerd.store.export_layout`), repoints the alias ``<dir>/<name>`` at it and keeps the newest
``keep`` versions; then, on
each server, lists the loaded adapters (``GET /v1/models``), loads the current one under its versioned name
if missing (``POST /v1/load_lora_adapter``) and unloads the versions of ``<name>`` no longer on disk
(``POST /v1/unload_lora_adapter``) — :mod:`learnerd.reconcilers.vllm_api`.

Failures never block training (this controller is apart from it) and never undo the files: a server that
fails is counted (``failures``, the ``on_failure`` metric hook), named in ``warnings`` (``ctl status``), and
the key is requeued after an exponential backoff per server and document (``retry_base_s`` doubling up to
``retry_max_s``) until the server answers. An adapter vLLM cannot load (DoRA, ...), or whose files are not the
ones committed (:meth:`~learnerd.store.adapters.AdapterVersion.verify`: a damaged adapter is never served), is
refused: a ``TerminalError`` and a warning, nothing written. ``resync_keys`` lists every document with a
current version, so a restart exports what a crash left out. ``changes`` counts ``written``, ``dropped``,
``loaded`` and ``unloaded``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio.to_thread
import structlog

from learnerd.eval.history import adapter_key, current_versions
from learnerd.fleet.ledger import adapter_store
from learnerd.reconcilers.spec import PROMOTIONS, AdapterPromotion, ControllerSpec, Watch, Wiring
from learnerd.reconcilers.vllm_api import VllmCallFailed, VllmServer
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.runtime.workqueue.rate_limiters import ItemExponentialFailureRateLimiter
from learnerd.store.adapters import AdapterStore, AdapterStoreError
from learnerd.store.dlm import DocumentError, read_document
from learnerd.store.export_layout import ExportRefused, Published, publish
from learnerd.store.vllm_layout import vllm_adapter_writer

log = structlog.get_logger(__name__)


class VllmExportReconciler:
    """Keeps ``directory`` and ``servers`` on each document's current adapter version (see the module docstring).

    Args:
        adapters: the adapter store the versions are read from.
        directory: the export directory (created when missing).
        docs_roots: where the documents are (the start-up list).
        keep: versions kept per document.
        servers: the vLLM servers told of each version (none: files only).
        base_model_name: the base's name on the servers (see :func:`~learnerd.store.vllm_layout.vllm_adapter_config`).
        retry_base_s, retry_max_s: a failing server's backoff, seconds, doubling from the first to the second.
        on_failure: called with a server's URL at each failed call (the failures metric).
    """

    name = "vllm_export"

    def __init__(
        self,
        adapters: AdapterStore,
        directory: Path,
        *,
        docs_roots: Sequence[Path],
        keep: int = 3,
        servers: Sequence[VllmServer] = (),
        base_model_name: str | None = None,
        retry_base_s: float = 1.0,
        retry_max_s: float = 300.0,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self._adapters = adapters
        self.directory = Path(directory)
        self._docs_roots = list(docs_roots)
        self._keep = keep
        self._servers = list(servers)
        self._base_model_name = base_model_name or None
        self._backoff: ItemExponentialFailureRateLimiter[tuple[str, str]] = ItemExponentialFailureRateLimiter(
            retry_base_s, retry_max_s
        )
        self._on_failure = on_failure
        self.changes: Counter[str] = Counter()
        #: Server URL → its failed calls since start-up.
        self.failures: Counter[str] = Counter()
        self._last_error: dict[str, str] = {}  # server URL → the last failure, while it keeps failing
        self._refused: dict[str, str] = {}  # document path → why its adapter is not exported

    @property
    def warnings(self) -> list[str]:
        """What an operator must act on (``ctl status``): refused adapters, servers failing now."""
        return [*self._refused.values()] + [
            f"vLLM server {url}: {self.failures[url]} failed calls so far, retrying with backoff; last: {error}"
            for url, error in sorted(self._last_error.items())
        ]

    def resync_keys(self) -> list[str]:
        """Every document with a current adapter version."""
        return [str(path) for path in current_versions(self._adapters, self._docs_roots)]

    async def reconcile(self, key: str) -> Result:
        path = Path(key)
        try:
            version = self._adapters.current(adapter_key(read_document(path)))
        except (DocumentError, OSError) as exc:
            log.info("vllm_export.unreadable_document", document=key, error=str(exc))
            return Result()  # the last export stays; the document's next change or commit comes back here
        if version is None:
            return Result()
        try:
            await anyio.to_thread.run_sync(version.verify)
            write = vllm_adapter_writer(version, self._base_model_name)
            published = await anyio.to_thread.run_sync(
                publish, self.directory, path.stem, version.number, self._keep, write
            )
        except (AdapterStoreError, ExportRefused) as exc:
            self._refused[key] = str(exc)
            log.warning("vllm_export.refused", document=key, reason=str(exc))
            raise TerminalError(f"{key}: {exc}") from exc
        self._refused.pop(key, None)
        if published.written:
            self.changes["written"] += 1
        if published.dropped:
            self.changes["dropped"] += len(published.dropped)
        delay = 0.0
        for server in self._servers:
            try:
                await self._tell(server, path.stem, published)
            except VllmCallFailed as exc:
                self.failures[server.url] += 1
                self._last_error[server.url] = str(exc)
                if self._on_failure is not None:
                    self._on_failure(server.url)
                delay = max(delay, self._backoff.when((server.url, key)))
                log.warning("vllm_export.server_failed", server=server.url, document=key, error=str(exc))
            else:
                self._backoff.forget((server.url, key))
                self._last_error.pop(server.url, None)
        return Result(requeue_after=delay) if delay else Result()

    async def _tell(self, server: VllmServer, name: str, published: Published) -> None:
        """Load ``published.name`` on ``server`` if missing; unload the versions of ``name`` no longer kept."""
        loaded = await server.loaded_adapters()
        if published.name not in loaded:
            await server.load(published.name, os.fspath(self.directory / published.name))
            self.changes["loaded"] += 1
        ours = re.compile(re.escape(name) + r"@v\d{4,}")
        for stale in sorted(n for n in loaded if ours.fullmatch(n) and n not in published.kept):
            await server.unload(stale)
            self.changes["unloaded"] += 1


def _promoted_document(wiring: Wiring, promotion: AdapterPromotion) -> list[str]:
    return [str(promotion.doc_path)]


def _build(wiring: Wiring) -> VllmExportReconciler:
    cfg = wiring.cfg
    vllm = cfg.export.vllm
    token = os.environ.get(vllm.token_env) or None
    return VllmExportReconciler(
        adapter_store(cfg),
        Path(vllm.dir),
        docs_roots=cfg.layout.docs_roots,
        keep=vllm.keep,
        servers=[VllmServer(url, token, vllm.timeout_s) for url in vllm.servers],
        base_model_name=vllm.base_model_name,
        retry_base_s=vllm.retry_base_s,
        retry_max_s=vllm.retry_max_s,
        on_failure=wiring.metrics.vllm_export_failed,
    )


#: Adapter versions → vLLM's resolver layout and servers, wired only with ``[export.vllm] dir``. Its one hook:
#: the watch below (each version the promotion gate promotes requeues its document).
SPEC = ControllerSpec(
    VllmExportReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 600.0},
    watches=(Watch(PROMOTIONS, _promoted_document),),
    enabled=lambda cfg: bool(cfg.export.vllm.dir),
)
