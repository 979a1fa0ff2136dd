"""Who is at the other end of a Unix socket: ``SO_PEERCRED`` (Linux, ``socket(7)``).

The kernel records the peer's pid, uid and gid when it calls ``connect(2)``; nothing the peer
sends can change them. The admin socket serves only its own user and root (:func:`is_allowed`).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

_UCRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


@dataclass(frozen=True)
class PeerCred:
    pid: int
    uid: int
    gid: int


def peer_cred(sock: Any) -> PeerCred:
    """The credentials of the process that connected ``sock`` (a Unix stream socket, or asyncio's
    ``TransportSocket`` wrapping one).

    Raises:
        OSError: ``sock`` is not a connected Unix socket.
    """
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return PeerCred(*_UCRED.unpack(raw))


def is_allowed(uid: int) -> bool:
    """True for this process's own uid and for root."""
    return uid in (os.getuid(), 0)
