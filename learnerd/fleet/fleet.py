"""One replica's part in the fleet: routing keys to their owners, exclusive reconciles, the vector index
kept in step with the ``embeddings`` table, and the lease (see docs/fleet.md).

* **Routing** (:class:`RoutedQueue`): an add of a key this replica owns goes on its own queue; an add of
  a key another replica owns is sent to it over NOTIFY (batched, flushed every :data:`FLUSH_S`). During
  a resync (:meth:`Fleet.resyncing`) keys owned elsewhere are dropped instead: every replica resyncs
  the keys it owns itself.
* **Exclusivity** (:class:`OwnedReconciler`): a reconcile of a key this replica does not own is skipped;
  otherwise it runs holding the key's advisory lock (``pg_try_advisory_lock`` on a connection of its
  own; a lock held elsewhere requeues the key after :data:`LOCK_RETRY_S`). A replica that dies loses its
  session, and PostgreSQL releases its locks at once. With ``[fleet] audit`` each reconcile is recorded
  in ``reconcile_log`` (queue, key, replica, started, finished).
* **Membership**: the lease is renewed every ``heartbeat_s``, and the live set is read again at each
  renewal and at the moment the oldest other lease expires; when it changes (a start, a clean stop, an
  expired lease) every replica resyncs, so the keys of a dead replica are picked up by their new owners
  when its lease ends, ``lease_ttl_s`` after its last renewal (plus a database round trip). With
  ``[fleet] audit`` each expiry is recorded in ``reconcile_log`` (queue ``replicas``).
* **Vectors**: after an embeddings reconcile the owner NOTIFYs the keys; every other replica reloads
  those rows into its :class:`~learnerd.store.vector_index.VectorIndex`, and reloads everything after a
  membership change or a reconnect of its listening connection.

Until :meth:`Fleet.run` has registered (``learnerd run --once``, ``backfill``) the replica owns every
key: it still takes the advisory locks, so it never reconciles a key at the same time as a running
replica.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import psycopg
import structlog

from learnerd.fleet import membership, notify
from learnerd.fleet.ledger import ReplicaConfig, adapter_store
from learnerd.fleet.ownership import lock_id, owner
from learnerd.runtime.reconcile import Result
from learnerd.store.adapters import AdapterStore
from learnerd.store.embeddings import iter_vectors
from learnerd.store.pg import PgConnection
from learnerd.store.vector_index import VectorIndex

if TYPE_CHECKING:
    from learnerd.store.settings import StoreConfig

log = structlog.get_logger(__name__)

LOCK_RETRY_S = 0.5
"""Seconds before a key whose advisory lock another replica holds is tried again."""
FLUSH_S = 0.02
"""Seconds between flushes of the keys waiting to be sent to their owners."""
RECONNECT_S = 1.0
"""Seconds between attempts to reconnect the listening connection."""
EXPIRY_MARGIN_S = 0.01
"""Seconds past a lease's expiry at which a survivor looks (the deletion's ``renewed < now - ttl`` is
strict), and the shortest sleep of the heartbeat loop."""
REPLICAS_QUEUE = "replicas"
"""The ``reconcile_log`` queue of lease expiries: key the dead replica, started its last renewal,
finished the deletion (the database's clock), replica the survivor that deleted it."""
TRAIN_ROLE, PIPELINE_ROLE = "train", "pipeline"


class RoutedQueue:
    """A workqueue whose ``add`` sends keys owned by another replica to that replica; every other
    method is the wrapped queue's."""

    def __init__(self, inner: Any, fleet: Fleet) -> None:
        self._inner = inner
        self._fleet = fleet

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)

    def add(self, key: str) -> None:
        fleet = self._fleet
        holder = fleet.owner_of(self._inner.name, key)
        if holder == fleet.replica_id:
            self._inner.add(key)
        elif holder is not None and not fleet.in_resync:
            fleet.send(self._inner.name, key)
        # holder None: no live replica has the queue's role (no trainer yet); its resync will list the key


class OwnedReconciler:
    """``inner`` with the fleet's ownership check, per-key advisory lock and audit (module docstring)."""

    def __init__(self, inner: Any, fleet: Fleet) -> None:
        self.inner = inner
        self.name: str = inner.name
        self._fleet = fleet

    @property
    def changes(self) -> Any:
        """The wrapped reconciler's change counters (the run summary reads them)."""
        return self.inner.changes

    def resync_keys(self) -> Any:
        """The wrapped reconciler's start-up list."""
        return self.inner.resync_keys()

    async def reconcile(self, key: str) -> Result:
        fleet = self._fleet
        if not fleet.owns(self.name, key):
            return Result()
        if not fleet.try_lock(self.name, key):
            return Result(requeue_after=LOCK_RETRY_S)
        started = time.time()
        try:
            return await self.inner.reconcile(key)
        finally:
            finished = time.time()  # before the unlock: another replica may take the key the moment after
            fleet.unlock(self.name, key)
            fleet.audit(self.name, [key], started, finished)


class OwnedBatchReconciler(OwnedReconciler):
    """:class:`OwnedReconciler` for a batch reconciler (embeddings); the keys it reconciled are
    announced to the other replicas' vector indexes."""

    def __init__(self, inner: Any, fleet: Fleet) -> None:
        super().__init__(inner, fleet)
        self.batch_size: int = inner.batch_size

    async def reconcile(self, key: str) -> Result:
        result = await super().reconcile(key)
        if self._fleet.owns(self.name, key):
            self._fleet.announce_vectors([key])
        return result

    async def reconcile_batch(self, keys: Sequence[str]) -> Mapping[str, Result | BaseException]:
        fleet = self._fleet
        outcomes: dict[str, Result | BaseException] = {}
        locked = []
        for key in keys:
            if not fleet.owns(self.name, key):
                outcomes[key] = Result()
            elif fleet.try_lock(self.name, key):
                locked.append(key)
            else:
                outcomes[key] = Result(requeue_after=LOCK_RETRY_S)
        if not locked:
            return outcomes
        started = time.time()
        try:
            outcomes.update(await self.inner.reconcile_batch(locked))
        finally:
            finished = time.time()
            for key in locked:
                fleet.unlock(self.name, key)
            fleet.audit(self.name, locked, started, finished)
        fleet.announce_vectors([k for k in locked if isinstance(outcomes.get(k), Result)])
        return outcomes


class Fleet:
    """This replica's membership in the fleet on the PostgreSQL database ``url``.

    Args:
        url: the database (its schema migrated).
        conn: the daemon's connection (event loop thread only): notifications and vector reads.
        state_dir: with the host, makes the replica id stable across restarts.
        host: the host name (``[fleet] host``, else ``socket.gethostname()``).
        roles: ``("pipeline",)`` or ``("pipeline", "train")``; only "train" replicas own training keys.
        lease_ttl_s, heartbeat_s: the lease (seconds).
        audit: record every reconcile in ``reconcile_log``.
        embedding_model: the embedder's name, whose vectors the index holds.

    Raises:
        StoreUnavailable: the lock connection cannot be opened.
    """

    def __init__(
        self,
        url: str,
        conn: Any,
        *,
        state_dir: str | os.PathLike[str],
        host: str = "",
        roles: tuple[str, ...] = (PIPELINE_ROLE,),
        lease_ttl_s: float = 15.0,
        heartbeat_s: float = 3.0,
        audit: bool = False,
        embedding_model: str = "",
        model_queues: tuple[str, ...] = (),
    ) -> None:
        self.url = url
        #: Queues whose keys only replicas with the "train" role own (the controller specs' ``model_work``).
        self.model_queues = model_queues
        self.host = host or socket.gethostname()
        self.replica_id = membership.replica_id(self.host, state_dir)
        self.roles = roles
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s
        self._audit = audit
        self._conn = conn
        self._lock_conn = PgConnection(url)  # raises psycopg.OperationalError: checked by db.connect first
        self._model = embedding_model
        self.index: VectorIndex | None = None
        self.adapters: AdapterStore | None = None  # the shared adapter store, on replicas that train
        self.queues: dict[str, Any] = {}
        self.replicas: list[membership.Replica] = []
        self._next_expiry: float | None = None  # seconds after _read_at when the oldest other lease expires
        self._read_at = 0.0
        self._members: dict[str, list[str]] | None = None  # role -> live replica ids; None: own every key
        self._outbox: dict[str, dict[str, None]] = {}
        self._resync_depth = 0
        self.messages_received = 0
        #: Called with a document key whose adapter another replica committed, and with None after a
        #: resync (a commit may have been missed): the daemon's served models re-read the store.
        self.adapters_changed: Callable[[str | None], None] | None = None

    # ------------------------------------------------------------------ ownership

    def role_of(self, queue: str) -> str:
        """The role whose replicas own ``queue``'s keys: "train" for the model queues (training and
        evaluation: model work, on the hosts that train), else "pipeline"."""
        return TRAIN_ROLE if queue in self.model_queues else PIPELINE_ROLE

    def owner_of(self, queue: str, key: str) -> str | None:
        """The live replica that owns ``key`` of ``queue`` (this one, before :meth:`run` registers), or
        None when no live replica has the queue's role."""
        if self._members is None:
            return self.replica_id
        return owner(key, self._members.get(self.role_of(queue), ()))

    def owns(self, queue: str, key: str) -> bool:
        """True when this replica owns ``key`` of ``queue`` (always, before :meth:`run` registers)."""
        return self.owner_of(queue, key) == self.replica_id

    def owners(self) -> dict[str, list[str]]:
        """Role → live replica ids, as this replica sees them."""
        return {role: list(ids) for role, ids in (self._members or {}).items()}

    @property
    def in_resync(self) -> bool:
        return self._resync_depth > 0

    @contextlib.contextmanager
    def resyncing(self) -> Iterator[None]:
        """While in this block, adds of keys owned elsewhere are dropped, not sent."""
        self._resync_depth += 1
        try:
            yield
        finally:
            self._resync_depth -= 1

    def route(self, queue: Any) -> RoutedQueue:
        """``queue`` wrapped so that its adds reach the keys' owners; remembered for incoming keys."""
        self.queues[queue.name] = queue
        return RoutedQueue(queue, self)

    def own(self, reconciler: Any) -> OwnedReconciler:
        """``reconciler`` wrapped with the ownership check, the advisory lock and the audit."""
        if hasattr(reconciler, "reconcile_batch"):
            return OwnedBatchReconciler(reconciler, self)
        return OwnedReconciler(reconciler, self)

    # ------------------------------------------------------------------ locks and audit

    def try_lock(self, queue: str, key: str) -> bool:
        """Take the advisory lock of ``key`` (session level, on the lock connection); False if held elsewhere.

        Raises:
            psycopg.OperationalError: the database is unreachable (the reconcile fails and backs off).
        """
        row = self._lock_conn.execute("SELECT pg_try_advisory_lock(?)", (lock_id(queue, key),)).fetchone()
        return row is not None and bool(row[0])

    def unlock(self, queue: str, key: str) -> None:
        with contextlib.suppress(psycopg.Error):
            self._lock_conn.execute("SELECT pg_advisory_unlock(?)", (lock_id(queue, key),))

    def audit(self, queue: str, keys: Sequence[str], started: float, finished: float) -> None:
        """Record ``keys`` of ``queue`` in ``reconcile_log`` from ``started`` to ``finished`` (Unix seconds;
        for a reconcile both taken while the keys' advisory locks were held) when ``[fleet] audit`` is on;
        a failure is logged, never raised."""
        if not self._audit:
            return
        try:
            self._lock_conn.executemany(
                "INSERT INTO reconcile_log (queue, key, replica, started, finished) VALUES (?, ?, ?, ?, ?)",
                [(queue, k, self.replica_id, started, finished) for k in keys],
            )
        except psycopg.Error as exc:
            log.warning("fleet.audit_failed", queue=queue, keys=len(keys), error=str(exc))

    # ------------------------------------------------------------------ messages

    def send(self, queue: str, key: str) -> None:
        """Queue ``key`` for its owner on another replica (sent at the next flush)."""
        self._outbox.setdefault(queue, {})[key] = None

    def announce_vectors(self, keys: Sequence[str]) -> None:
        """Tell the other replicas that the ``embeddings`` rows of ``keys`` changed."""
        if keys and self._members is not None and len(self._members.get(PIPELINE_ROLE, ())) > 1:
            self._outbox.setdefault(notify.VECTORS, {}).update(dict.fromkeys(keys))

    def flush(self) -> None:
        """NOTIFY every waiting key; on a database error the keys stay queued for the next flush."""
        while self._outbox:
            queue, keys = next(iter(self._outbox.items()))
            for payload in notify.payloads(self.replica_id, queue, list(keys)):
                self._conn.execute("SELECT pg_notify(?, ?)", (notify.CHANNEL, payload))
            del self._outbox[queue]

    def receive(self, payload: str) -> None:
        """Handle one NOTIFY payload (see :mod:`learnerd.fleet.notify`); a malformed one is logged."""
        try:
            message = notify.parse(payload)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("fleet.bad_message", error=str(exc), payload=payload[:200])
            return
        if message.sender == self.replica_id:
            return
        self.messages_received += 1
        if message.queue == notify.VECTORS:
            self.reload_vectors(message.keys)
            return
        if message.queue == notify.ADAPTERS:
            if self.adapters_changed is not None:
                for key in message.keys:
                    self.adapters_changed(key)
            return
        queue = self.queues.get(message.queue)
        if queue is None:
            return  # a queue this replica does not run (training on a CPU front end)
        for key in message.keys:
            if self.owns(message.queue, key):
                queue.add(key)

    # ------------------------------------------------------------------ vector index

    def reload_vectors(self, keys: Sequence[str]) -> None:
        """Bring the index's rows of ``keys`` in line with the ``embeddings`` table (upsert or delete)."""
        if self.index is None:
            return
        found: set[str] = set()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT example_id, dim, vector FROM embeddings WHERE model = ? AND example_id IN ({marks})",
                [self._model, *chunk],
            ).fetchall()
            if rows:
                import numpy as np

                matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), rows[0][1])
                self.index.upsert([r[0] for r in rows], matrix)
                found.update(r[0] for r in rows)
        self.index.delete([k for k in keys if k not in found])

    def resync_index(self) -> None:
        """Reload the whole index from the ``embeddings`` table (after a membership change or reconnect)."""
        if self.index is None:
            return
        stored: set[str] = set()
        for ids, matrix in iter_vectors(self._conn, self._model):
            self.index.upsert(ids, matrix)
            stored.update(ids)
        self.index.delete([i for i in self.index.ids() if i not in stored])

    # ------------------------------------------------------------------ lifecycle

    def _refresh(self) -> bool:
        """Read the live replicas (deleting expired leases: audited as ``("replicas", dead id)`` rows, from
        its last renewal to the deletion); True when the set of owners changed."""
        view = membership.members(self._conn, self.lease_ttl_s)
        self.replicas = view.replicas
        self._next_expiry = membership.next_expiry_s(view, self.lease_ttl_s, self.replica_id)
        self._read_at = time.monotonic()
        for dead in view.expired:
            log.warning("fleet.lease_expired", replica=dead.id, after_s=round(dead.deleted - dead.renewed, 3))
            self.audit(REPLICAS_QUEUE, [dead.id], dead.renewed, dead.deleted)
        members = {role: [r.id for r in self.replicas if role in r.roles] for role in (PIPELINE_ROLE, TRAIN_ROLE)}
        for role in self.roles:  # this replica always counts itself, even before its row is visible
            if self.replica_id not in members[role]:
                members[role] = sorted([*members[role], self.replica_id])
        changed = members != self._members
        self._members = members
        return changed

    def _wait_s(self, next_renewal: float) -> float:
        """Seconds to sleep: until this replica's next renewal (monotonic ``next_renewal``) or until the
        oldest other lease expires (plus :data:`EXPIRY_MARGIN_S`), whichever comes first."""
        now = time.monotonic()
        wait = next_renewal - now
        if self._next_expiry is not None:
            wait = min(wait, self._next_expiry - (now - self._read_at) + EXPIRY_MARGIN_S)
        return max(wait, EXPIRY_MARGIN_S)

    async def run(
        self, resync: Callable[[], None], *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Register, listen, heartbeat, flush; until cancelled (then leave). ``resync()`` re-lists every
        key the daemon has (called under :meth:`resyncing` after membership changes and reconnects).

        Reports started once registered and listening, so the daemon's first resync sees the fleet.
        """
        membership.register(self._conn, self.replica_id, self.host, os.getpid(), self.roles)
        self._refresh()
        self.set_aside_orphan_adapters()
        log.info("fleet.joined", replica=self.replica_id, roles=self.roles, live=len(self.replicas))
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self._listen, resync)
                tg.start_soon(self._heartbeat, resync)
                tg.start_soon(self._flusher)
                task_status.started()
        finally:
            with contextlib.suppress(psycopg.Error):
                self.flush()
                membership.leave(self._conn, self.replica_id)

    def _resync(self, resync: Callable[[], None], why: str) -> None:
        """Resync the daemon's keys and the vector index, and set aside orphan adapter versions; a failure is
        logged (the next membership change, reconnect or restart resyncs again), never raised into the
        fleet's loops."""
        log.info("fleet.resync", why=why, owners={r: len(ids) for r, ids in self.owners().items()})
        try:
            with self.resyncing():
                resync()
            self.resync_index()
            self.set_aside_orphan_adapters()
            if self.adapters_changed is not None:
                self.adapters_changed(None)
        except Exception:
            log.exception("fleet.resync_failed", why=why)

    async def _heartbeat(self, resync: Callable[[], None]) -> None:
        """Renew the lease every ``heartbeat_s``, and look at the live set again the moment the oldest other
        lease expires, so a dead replica's keys move when its lease ends (not up to a heartbeat later)."""
        next_renewal = time.monotonic() + self.heartbeat_s
        while True:
            await anyio.sleep(self._wait_s(next_renewal))
            try:
                if time.monotonic() >= next_renewal:
                    next_renewal = time.monotonic() + self.heartbeat_s
                    if not membership.renew(self._conn, self.replica_id):
                        membership.register(self._conn, self.replica_id, self.host, os.getpid(), self.roles)
                if self._refresh():
                    self._resync(resync, "membership changed")
            except psycopg.Error as exc:
                log.warning("fleet.heartbeat_failed", error=str(exc).strip()[:300])
                self._next_expiry = None  # the view is stale: try again at the next renewal

    async def _flusher(self) -> None:
        while True:
            await anyio.sleep(FLUSH_S)
            try:
                self.flush()
            except psycopg.Error as exc:
                log.warning("fleet.notify_failed", error=str(exc).strip()[:300])
                await anyio.sleep(RECONNECT_S)

    async def _listen(
        self, resync: Callable[[], None], *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        connected_before = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as aconn:
                    await aconn.execute(f"LISTEN {notify.CHANNEL}")
                    if connected_before:
                        self._resync(resync, "listener reconnected")
                    else:
                        connected_before = True
                        task_status.started()
                    async for message in aconn.notifies():
                        self.receive(message.payload)
            except psycopg.Error as exc:
                log.warning("fleet.listener_lost", error=str(exc).strip()[:300], retry_s=RECONNECT_S)
                if not connected_before:
                    raise
            await anyio.sleep(RECONNECT_S)

    def status(self, block_ids: Sequence[str] = ()) -> dict[str, Any]:
        """The fleet as ``ctl status`` shows it: this replica, the live replicas with their leases, and
        how many of ``block_ids`` (the "examples" and "embeddings" keys) each owns, by this replica's view."""
        counts = dict.fromkeys(self._members.get(PIPELINE_ROLE, ()) if self._members else (self.replica_id,), 0)
        for key in block_ids:
            counts[owner(key, list(counts)) or self.replica_id] += 1
        return {
            "replica": self.replica_id,
            "host": self.host,
            "roles": list(self.roles),
            "lease_ttl_s": self.lease_ttl_s,
            "replicas": [
                {"id": r.id, "host": r.host, "pid": r.pid, "roles": list(r.roles), "renewed": r.renewed}
                for r in self.replicas
            ],
            "block_keys_per_owner": counts,
            "messages_received": self.messages_received,
        }

    def set_aside_orphan_adapters(self) -> int:
        """Remove the staging directories of dead writers (a replica killed mid-cycle: its flock is gone) and
        move aside every adapter version directory without an ``adapter_commits`` row (renamed by a replica
        that died before its COMMIT: never committed, never served) — :meth:`AdapterStore.recover`;
        level-triggered, run when the replica joins and at each resync. Returns how many."""
        if self.adapters is None:
            return 0
        moved = self.adapters.recover()
        for path in moved:
            log.warning("fleet.adapter_leftover_removed", path=str(path))
        return len(moved)

    def close(self) -> None:
        self._lock_conn.close()
        if self.adapters is not None:
            self.adapters.close()


class TrainingEnabled(Protocol):
    @property
    def enabled(self) -> bool: ...


class FleetedConfig(ReplicaConfig, Protocol):
    """What :func:`fleet_for` reads of the configuration (``[training]`` is declared in a layer above)."""

    @property
    def store(self) -> StoreConfig: ...
    @property
    def training(self) -> TrainingEnabled: ...


def fleet_for(cfg: FleetedConfig, conn: Any, embedding_model: str, model_queues: tuple[str, ...] = ()) -> Fleet | None:
    """The :class:`Fleet` of a daemon on ``cfg`` (a :class:`learnerd.daemon.config.Config`; None on SQLite: one
    process, nothing to share); ``embedding_model`` names the vectors its index holds; ``model_queues``
    the queues only "train" replicas own.

    Raises:
        psycopg.OperationalError: the lock connection cannot be opened.
    """
    if not cfg.layout.is_postgres:
        return None
    fleet = Fleet(
        cfg.store.url,
        conn,
        state_dir=cfg.state_dir,
        host=cfg.fleet.host,
        roles=(PIPELINE_ROLE, TRAIN_ROLE) if cfg.training.enabled else (PIPELINE_ROLE,),
        lease_ttl_s=cfg.fleet.lease_ttl_s,
        heartbeat_s=cfg.fleet.heartbeat_s,
        audit=cfg.fleet.audit,
        embedding_model=embedding_model,
        model_queues=model_queues,
    )
    if cfg.training.enabled:
        fleet.adapters = adapter_store(cfg)
    return fleet
