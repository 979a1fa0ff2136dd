"""Heartbeat leases in the ``replicas`` table (id, host, pid, started, renewed, roles).

A replica inserts its row at start and renews ``renewed`` every ``[fleet] heartbeat_s``; a row not
renewed for ``[fleet] lease_ttl_s`` belongs to a dead replica (``kill -9``, a partition, a lost host)
and is deleted by the next replica that looks. Times are the database server's clock
(``clock_timestamp()``, epoch seconds), so the hosts' clocks need not agree.

A replica's id is stable across restarts of the same state directory on the same host, so a restart
takes its own lease back at once instead of waiting for the old one to expire.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

NOW = "extract(epoch from clock_timestamp())"


@dataclass(frozen=True)
class Replica:
    """One row of ``replicas``: ``roles`` such as ``("pipeline", "train")``; times in epoch seconds."""

    id: str
    host: str
    pid: int
    started: float
    renewed: float
    roles: tuple[str, ...]


def replica_id(host: str, state_dir: str | os.PathLike[str]) -> str:
    """The id of the replica on ``host`` with ``state_dir``: ``host:<absolute state_dir>``."""
    return f"{host}:{os.path.abspath(state_dir)}"


def register(conn: Any, replica_id: str, host: str, pid: int, roles: tuple[str, ...]) -> None:
    """Insert (or take back) this replica's row with a fresh lease."""
    conn.execute(
        f"INSERT INTO replicas (id, host, pid, started, renewed, roles) VALUES (?, ?, ?, {NOW}, {NOW}, ?)"
        " ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, started = EXCLUDED.started,"
        " renewed = EXCLUDED.renewed, roles = EXCLUDED.roles",
        (replica_id, host, pid, ",".join(roles)),
    )


def renew(conn: Any, replica_id: str) -> bool:
    """Renew the lease; False when the row is gone (another replica found it expired: register again)."""
    return conn.execute(f"UPDATE replicas SET renewed = {NOW} WHERE id = ?", (replica_id,)).rowcount == 1


@dataclass(frozen=True)
class Expired:
    """A lease found expired and deleted: the dead replica's id, its last renewal and the deletion time
    (epoch seconds, the database's clock)."""

    id: str
    renewed: float
    deleted: float


@dataclass(frozen=True)
class Members:
    """The live replicas (ordered by id), the database's clock when they were read, and the leases this
    read found expired (and deleted)."""

    replicas: list[Replica]
    now: float
    expired: list[Expired]


def members(conn: Any, ttl_s: float) -> Members:
    """The replicas whose lease is current; expired rows are deleted on the way (and returned)."""
    gone = conn.execute(
        f"DELETE FROM replicas WHERE renewed < {NOW} - ? RETURNING id, renewed, {NOW}", (ttl_s,)
    ).fetchall()
    rows = conn.execute(f"SELECT id, host, pid, started, renewed, roles, {NOW} FROM replicas ORDER BY id").fetchall()
    now = rows[0][6] if rows else conn.execute(f"SELECT {NOW}").fetchone()[0]
    return Members(
        [Replica(r[0], r[1], r[2], r[3], r[4], tuple(filter(None, r[5].split(",")))) for r in rows],
        float(now),
        [Expired(r[0], r[1], float(r[2])) for r in gone],
    )


def live(conn: Any, ttl_s: float) -> list[Replica]:
    """The replicas whose lease is current, ordered by id; expired rows are deleted on the way."""
    return members(conn, ttl_s).replicas


def next_expiry_s(view: Members, ttl_s: float, exclude: str) -> float | None:
    """Seconds after ``view.now`` at which the oldest lease other than ``exclude``'s expires (None when
    there is none): the moment a survivor should look again to take a dead replica's keys over."""
    others = [r.renewed for r in view.replicas if r.id != exclude]
    return min(others) + ttl_s - view.now if others else None


def leave(conn: Any, replica_id: str) -> None:
    """Delete this replica's row (a clean stop: its keys move at once)."""
    conn.execute("DELETE FROM replicas WHERE id = ?", (replica_id,))
