"""The foyle export reconciler: ``[export.foyle] dir`` holds one foyle ``Example`` file per learned example.

Key: an example id. Level-triggered: ``reconcile(id)`` writes ``<dir>/<id>.example.binpb``
(:mod:`learnerd.store.foyle_examples`) when the example exists and its file's bytes differ from what the
example and its current embedding give, and deletes the file when the example is gone. An example whose
vector is not yet current (the embeddings reconciler has not caught up) is requeued after
``embedding_wait_s``. ``resync_keys`` lists every example and every file on disk, so a restart rewrites
missing or stale files and deletes orphans. ``changes`` counts ``written`` and ``deleted`` files.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import anyio.to_thread
import structlog

from learnerd.ml.embedders import embedder_dim, embedder_name
from learnerd.reconcilers.spec import EXAMPLES, ControllerSpec, Watch, Wiring, example_id
from learnerd.runtime.reconcile import Result
from learnerd.store import foyle_examples
from learnerd.store.embeddings import get_vector, text_hash
from learnerd.store.examples import get_example, list_example_ids

log = structlog.get_logger(__name__)


class FoyleExportReconciler:
    """Keeps ``directory`` equal to the examples, as foyle ``Example`` files (see the module docstring).

    Args:
        conn: the daemon's SQLite connection (read on the event loop's thread).
        directory: where the files go (created when missing).
        embedding_model: the name of the embedder whose vectors are exported.
        embedding_wait_s: seconds before an example without a current vector is looked at again.
        embedding_dim: the embedder's vector size when known before its first vector (MiniLM: 384).

    ``warnings`` holds what an operator must know (``ctl status``): foyle refuses embeddings that are not
    :data:`~learnerd.store.foyle_examples.FOYLE_EMBEDDING_DIM` long, so the files are written but foyle
    will not load them; said once, at start-up or at the first such vector.
    """

    name = "foyle_export"

    def __init__(
        self,
        conn: sqlite3.Connection,
        directory: Path,
        embedding_model: str,
        embedding_wait_s: float = 1.0,
        embedding_dim: int | None = None,
    ) -> None:
        self._conn = conn
        self.directory = Path(directory)
        self._model = embedding_model
        self._wait_s = embedding_wait_s
        self.changes: Counter[str] = Counter()
        self.warnings: list[str] = []
        if embedding_dim is not None:
            self._check_dim(embedding_dim)
        foyle_examples.message_classes()  # compile foyle's protos now: a broken toolchain fails at start

    def resync_keys(self) -> list[str]:
        """Every example id and every file's id (a file whose example is gone is deleted)."""
        return sorted(set(list_example_ids(self._conn)) | set(foyle_examples.ids_on_disk(self.directory)))

    async def reconcile(self, key: str) -> Result:
        path = foyle_examples.example_path(self.directory, key)
        example = get_example(self._conn, key)
        if example is None:
            if await anyio.to_thread.run_sync(foyle_examples.remove, path):
                self.changes["deleted"] += 1
            return Result()
        stored = get_vector(self._conn, key)
        if stored is None or stored[0].model != self._model or stored[0].text_hash != text_hash(example.query):
            return Result(requeue_after=self._wait_s)
        self._check_dim(len(stored[1]))
        data = foyle_examples.example_bytes(example, stored[1])
        if await anyio.to_thread.run_sync(foyle_examples.write_if_changed, path, data):
            self.changes["written"] += 1
        return Result()

    def _check_dim(self, dim: int) -> None:
        if dim == foyle_examples.FOYLE_EMBEDDING_DIM or self.warnings:
            return
        message = (
            f"foyle loads only {foyle_examples.FOYLE_EMBEDDING_DIM}-d embeddings; the exported files carry "
            f'{dim}-d vectors of {self._model}, so foyle will refuse them: set [embeddings] backend = "openai" '
            "with foyle's model (text-embedding-3-small)"
        )
        self.warnings.append(message)
        log.warning("foyle_export.embedding_dim", dim=dim, expected=foyle_examples.FOYLE_EMBEDDING_DIM, hint=message)


def _build(wiring: Wiring) -> FoyleExportReconciler:
    cfg = wiring.cfg
    return FoyleExportReconciler(
        wiring.conn,
        Path(cfg.export.foyle.dir),
        embedder_name(cfg.embeddings),
        embedding_wait_s=1.0,
        embedding_dim=embedder_dim(cfg.embeddings),
    )


#: Examples → foyle ``Example`` files, wired only with ``[export.foyle] dir``.
SPEC = ControllerSpec(
    FoyleExportReconciler.name,
    _build,
    watches=(Watch(EXAMPLES, example_id),),
    enabled=lambda cfg: bool(cfg.export.foyle.dir),
    key_kind="example id",
)
