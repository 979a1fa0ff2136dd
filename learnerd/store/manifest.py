"""An adapter version's manifest (``versions/vNNNN/manifest.json``): what it learned, and where that came from.

Written by :func:`learnerd.training.cycle.train_cycle` into the version's staging directory before the commit
renames it into place (:mod:`learnerd.store.adapters`), so a committed version always has the manifest it
was committed with, and a crash leaves none half-written. Versions committed before manifests existed have
none (:func:`read_manifest` returns None).

The file is one JSON object (schema version :data:`MANIFEST_SCHEMA_VERSION`)::

    {"schema_version": 1, "doc_key": "01K…", "created_at": "2026-11-25T16:00:00+00:00",
     "mode": "incremental", "reason": "…", "base_model": "builtin:tiny-llama",
     "parent_version": 2,            # the version training resumed from (null: a fresh adapter)
     "previous_version": 2,          # the current version when the cycle started, compared against below
     "steps": 24, "start_loss": 4.1, "final_loss": 0.02, "losses": [4.0, 3.1, …],   # nats/token, per step
     "sections": [SectionOrigin, …], # every section the adapter embodies, in document order
     "added": ["<section id>", …],   # in ``sections`` and not in the previous version
     "replayed": ["<section id>", …],# rehearsed from the previous version in this cycle (incremental only)
     "removed": [SectionOrigin, …],  # in the previous version and gone now (their origin as it was then)
     "routing": {"threshold": 0.61, "embedder": "all-MiniLM-L6-v2", …}}  # null: none recorded

A :class:`SectionOrigin` names the section and its training rows and, when learnerd wrote it (its auto-harvest
marker), the marker's source; for a learned example (marker ``learnerd/<example id>``, written by the probes
reconciler) also the example id, the block id (the same id: foyle's TN006) and where the executed cell was
read — log file, 1-based line, the event's time (epoch seconds) and the reader that parsed it.

``routing`` is the document's routing threshold and how it was calibrated (:func:`learnerd.ml.router.calibrate`:
the entry's keys are :meth:`~learnerd.ml.router.Calibration.to_dict`'s); a version without it routes with the
default threshold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from learnerd.store.atomic import atomic_write_text
from learnerd.store.blocks import get_block
from learnerd.store.examples import EXAMPLE_SOURCE_PREFIX

MANIFEST_FILE = "manifest.json"
MANIFEST_SCHEMA_VERSION = 1


class ManifestError(Exception):
    """A ``manifest.json`` that cannot be read or parsed, or of a newer schema."""


@dataclass(frozen=True)
class SectionOrigin:
    """One section an adapter version trained on, and where it came from (see the module docstring).

    ``rows``: the training rows it gives (one per Q/A pair; one for prose); ``source``: its auto-harvest marker's
    source (None: written by a person); ``example_id`` / ``block_id``: the learned example it holds (None when
    it holds none); ``file`` / ``line``: the log line its executed cell was read from; ``time``: when the cell
    was executed (epoch seconds, the event's own time); ``reader``: the log format that parsed it; ``session``:
    the assistant session it was run in, for the session readers (Claude Code, Codex CLI, OpenTelemetry GenAI),
    whose block ids are ``<reader>:<session>:<call id>`` (None for other readers).
    """

    section_id: str
    rows: int = 0
    source: str | None = None
    example_id: str | None = None
    block_id: str | None = None
    file: str | None = None
    line: int | None = None
    time: float | None = None
    reader: str | None = None
    session: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SectionOrigin:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


@dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json`` (module docstring); ``version`` is the version's number, taken from its
    directory by :func:`read_manifest` (0 in a manifest not yet committed)."""

    doc_key: str
    created_at: str
    mode: str
    reason: str
    base_model: str
    parent_version: int | None
    previous_version: int | None
    steps: int
    start_loss: float
    final_loss: float
    losses: tuple[float, ...]
    sections: tuple[SectionOrigin, ...]
    added: tuple[str, ...]
    replayed: tuple[str, ...]
    removed: tuple[SectionOrigin, ...]
    version: int = 0
    schema_version: int = MANIFEST_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    routing: dict[str, Any] | None = None

    def section(self, section_id: str) -> SectionOrigin | None:
        """The entry of ``section_id`` among the sections this version embodies, or None."""
        return next((s for s in self.sections if s.section_id == section_id), None)

    def added_origins(self) -> list[SectionOrigin]:
        """The entries of the sections added in this version, in document order."""
        added = set(self.added)
        return [s for s in self.sections if s.section_id in added]

    def example_ids(self) -> set[str]:
        """The ids of the learned examples this version embodies."""
        return {s.example_id for s in self.sections if s.example_id is not None}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["version"]  # the directory's name says it
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], version: int = 0) -> Manifest:
        """Raises ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed dict (``read_manifest`` wraps them)."""
        if not isinstance(raw, Mapping):
            raise TypeError(f"a JSON object is expected, not {type(raw).__name__}")
        if not isinstance(raw.get("schema_version"), int) or raw["schema_version"] > MANIFEST_SCHEMA_VERSION:
            raise ValueError(f"schema_version {raw.get('schema_version')!r} is not one this learnerd reads")
        values = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw and k != "version"}
        values["losses"] = tuple(float(x) for x in raw["losses"])
        values["sections"] = tuple(SectionOrigin.from_dict(s) for s in raw["sections"])
        values["removed"] = tuple(SectionOrigin.from_dict(s) for s in raw["removed"])
        values["added"], values["replayed"] = tuple(raw["added"]), tuple(raw["replayed"])
        return cls(**values, version=version)


def write_manifest(directory: str | Path, manifest: Manifest) -> Path:
    """Write ``manifest`` as ``<directory>/manifest.json`` atomically (temp file, fsync, rename); returns the path.

    Raises:
        OSError: the file cannot be written (nothing is left half-written).
    """
    path = Path(directory) / MANIFEST_FILE
    atomic_write_text(path, json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return path


def read_manifest(directory: str | Path, version: int = 0) -> Manifest | None:
    """The manifest in ``directory`` (an adapter version's), with ``version`` filled in; None when it has none
    (a version committed before manifests existed).

    Raises:
        ManifestError: the file is unreadable, not JSON, or not a manifest this learnerd reads (path and reason).
    """
    path = Path(directory) / MANIFEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{path}: {exc.strerror or exc}") from exc
    try:
        return Manifest.from_dict(json.loads(text), version)
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: not a readable manifest: {exc}") from exc


def section_origins(conn: Any, markers: Mapping[str, str]) -> dict[str, SectionOrigin]:
    """Where the sections with an auto-harvest marker came from: section id → :class:`SectionOrigin`.

    ``markers``: section id → its marker's source. A ``learnerd/<example id>`` source names a learned example
    (:func:`learned_origin`). ``rows`` is left 0 for the caller.

    Raises:
        sqlite3.Error, psycopg.Error: the database failed.
    """
    out: dict[str, SectionOrigin] = {}
    for section_id, source in markers.items():
        if source.startswith(EXAMPLE_SOURCE_PREFIX):
            out[section_id] = learned_origin(conn, source.removeprefix(EXAMPLE_SOURCE_PREFIX), section_id)
        else:
            out[section_id] = SectionOrigin(section_id, source=source)
    return out


def learned_origin(conn: Any, example_id: str, section_id: str = "") -> SectionOrigin:
    """Where the learned example ``example_id`` came from: its block (example id = block id) and the log file,
    line, time and reader of the block's executed cell (None each for a block no longer stored, or ingested
    before learnerd kept the line; ``conn`` None: no store to ask). ``section_id``: its probe section's, if known.

    Raises:
        sqlite3.Error, psycopg.Error: the database failed.
    """
    block = get_block(conn, example_id) if conn is not None else None
    origin = block.executed_origin if block is not None else None
    return SectionOrigin(
        section_id,
        source=EXAMPLE_SOURCE_PREFIX + example_id,
        example_id=example_id,
        block_id=example_id,
        file=origin.path if origin is not None else None,
        line=origin.line if origin is not None else None,
        time=block.executed_time if block is not None else None,
        reader=block.source if block is not None else None,
        session=session_of(example_id, block.source) if block is not None else None,
    )


def session_of(block_id: str, reader: str) -> str | None:
    """The assistant session of a block a session reader wrote (id ``<reader>:<session>:<call id>``), else None."""
    parts = block_id.split(":")
    return parts[1] if len(parts) == 3 and parts[0] == reader and parts[1] else None


def sections_with_rows(
    section_ids: Sequence[str], rows: Mapping[str, int], origins: Mapping[str, SectionOrigin]
) -> tuple[SectionOrigin, ...]:
    """One entry per id of ``section_ids`` (in order): its origin from ``origins`` (a bare entry when it has
    none, i.e. a section a person wrote) with ``rows`` filled in from ``rows``."""
    out = []
    for section_id in section_ids:
        origin = origins.get(section_id, SectionOrigin(section_id))
        out.append(SectionOrigin(**{**asdict(origin), "rows": rows.get(section_id, 0)}))
    return tuple(out)


def document_origins(target: str | Path | None, markers: Mapping[str, str]) -> dict[str, SectionOrigin]:
    """:func:`section_origins` on the store at ``target`` (a SQLite path or PostgreSQL URL), with a connection of
    its own (blocking: call it in a worker thread). Without a store (``target`` None, or a SQLite file that does
    not exist yet) learned examples are recorded by their marker alone.

    Raises:
        sqlite3.Error, psycopg.Error, StoreUnavailable, SchemaError: the database failed.
    """
    from learnerd.store.db import connect, is_postgres

    learned = any(source.startswith(EXAMPLE_SOURCE_PREFIX) for source in markers.values())
    if target is None or not learned or (not is_postgres(target) and not Path(target).exists()):
        return section_origins(None, markers)
    conn = connect(target)
    try:
        return section_origins(conn, markers)
    finally:
        conn.close()
