"""The embeddings reconciler: example → vector in SQLite and in the in-memory :class:`VectorIndex`.

Batched: the controller hands it up to ``batch_size`` ready example ids at once and the embedder
runs once per batch, in a worker thread so the event loop stays free. Level-triggered per key:
an example whose stored vector has the current model and the hash of the current text needs no
work; a missing example loses its vector; anything else is (re)embedded. The embedded text is the
example's query — retrieval finds examples whose context resembles the assistant's current context.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import anyio
import structlog

from learnerd.ml.embedders import Embedder
from learnerd.reconcilers.spec import EXAMPLES, ControllerSpec, Watch, Wiring, example_id
from learnerd.runtime.reconcile import Result
from learnerd.store import db
from learnerd.store.embeddings import (
    EmbeddingMeta,
    delete_vectors,
    get_metas,
    list_embedding_ids,
    put_vectors,
    text_hash,
)
from learnerd.store.examples import get_examples, list_example_ids
from learnerd.store.vector_index import VectorIndex

log = structlog.get_logger(__name__)


class EmbeddingsReconciler:
    """Keeps the ``embeddings`` table and ``index`` equal to the examples (key: example id).

    ``changes`` counts ``embedded`` and ``deleted`` vectors.
    """

    name = "embeddings"

    def __init__(
        self,
        conn: sqlite3.Connection,
        embedder: Embedder,
        index: VectorIndex,
        batch_size: int = 64,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._conn = conn
        self._embedder = embedder
        self._index = index
        self.batch_size = batch_size
        self._clock = clock
        self.changes: Counter[str] = Counter()

    def resync_keys(self) -> list[str]:
        """Every example id and every vector's id (a vector whose example is gone is deleted)."""
        return sorted(set(list_example_ids(self._conn)) | set(list_embedding_ids(self._conn)))

    async def reconcile(self, key: str) -> Result:
        outcome = (await self.reconcile_batch([key]))[key]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def reconcile_batch(self, keys: Sequence[str]) -> Mapping[str, Result | BaseException]:
        keys = list(dict.fromkeys(keys))
        examples = get_examples(self._conn, keys)
        metas = get_metas(self._conn, keys)
        model = self._embedder.name
        hashes = {k: text_hash(ex.query) for k, ex in examples.items()}
        gone = [k for k in keys if k not in examples and k in metas]
        stale = [k for k in examples if metas.get(k) != EmbeddingMeta(model, hashes[k])]
        if stale:
            vectors = await anyio.to_thread.run_sync(self._embedder.embed, [examples[k].query for k in stale])
        if stale or gone:
            with db.transaction(self._conn):
                delete_vectors(self._conn, gone)
                if stale:
                    put_vectors(self._conn, stale, vectors, model, [hashes[k] for k in stale], self._clock())
        self._index.delete([k for k in keys if k not in examples])
        if stale:
            self._index.upsert(stale, vectors)
        if stale or gone:
            self.changes.update(embedded=len(stale), deleted=len(gone))
            log.info("embeddings reconciled", embedded=len(stale), deleted=len(gone), batch=len(keys))
        return {k: Result() for k in keys}


def _build(wiring: Wiring) -> EmbeddingsReconciler:
    return EmbeddingsReconciler(
        wiring.conn,
        wiring.require_embedder(),
        wiring.index,
        batch_size=wiring.cfg.embeddings.batch_size,
        clock=wiring.clock,
    )


#: Examples → vectors (batched): every changed example is embedded again; built once the embedder loaded.
SPEC = ControllerSpec(
    EmbeddingsReconciler.name,
    _build,
    defaults={"workers": 1, "timeout_s": 300.0},
    watches=(Watch(EXAMPLES, example_id),),
    needs_embedder=True,
    key_kind="block id",
)
