"""learnerd's examples as foyle's ``Example`` protobuf files, ``<dir>/<id>.example.binpb``: what foyle's
agent loads its few-shot examples from (foyle ``app/pkg/learn/learner.go`` writes the same files).

The message classes come from foyle's own ``.proto`` files, vendored in ``foyle_proto/`` (see its
README): compiled once per process with ``grpc_tools.protoc`` into a descriptor set, turned into classes by
``protobuf``'s message factory. An example maps to ``Example{id, embedding, query: Doc{blocks: [MARKUP
block with the query]}, answer: [CODE block with the answer in its language]}``; ``embedding`` is the
stored float32 vector of the query. foyle compares it with embeddings of its own model, so it is only
useful when learnerd's ``[embeddings]`` backend is the OpenAI-compatible one with foyle's model.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
from google.protobuf.message import DecodeError

from learnerd.store.atomic import atomic_write_bytes, fsync_dir
from learnerd.store.examples import Example

#: The embedding size foyle's ``loadRow`` accepts (OpenAI's text-embedding-3-small, foyle's model).
FOYLE_EMBEDDING_DIM = 1536

#: foyle's file name suffix (``learner.go``'s ``fileSuffix``).
SUFFIX = ".example.binpb"
PROTO_ROOT = Path(__file__).parent / "foyle_proto"
TRAINER_PROTO = "foyle/v1alpha1/trainer.proto"
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,200}$")
_NAME_MAX_BYTES = 255  # NAME_MAX of Linux file systems
_HASHED_PREFIX = "%%"  # never produced by percent-encoding: a name too long to hold its id


class FoyleProtoError(RuntimeError):
    """The vendored ``.proto`` files could not be compiled (grpcio-tools missing or failing)."""


def descriptor_set() -> bytes:
    """A serialized ``FileDescriptorSet`` of the vendored protos and their imports.

    Raises:
        FoyleProtoError: ``grpc_tools.protoc`` is not installed or fails.
    """
    try:
        well_known = resources.files("grpc_tools") / "_proto"
    except ModuleNotFoundError as exc:
        raise FoyleProtoError("the foyle export needs grpcio-tools (pip install grpcio-tools)") from exc
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "foyle.fds"
        args = [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}",
            "--include_imports", f"--descriptor_set_out={out}", TRAINER_PROTO,
        ]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise FoyleProtoError(f"protoc failed on {TRAINER_PROTO}: {done.stderr.strip()}")
        return out.read_bytes()


@functools.cache
def message_classes() -> dict[str, Any]:
    """``{"Example", "Doc", "Block", "BlockKind"}``: foyle's classes (and the enum's value map)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set())
    pool = descriptor_pool.DescriptorPool()
    for file in fds.file:
        pool.Add(file)
    classes = {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in ("Example", "Doc", "Block")}
    return {**classes, "BlockKind": {v.name: v.number for v in pool.FindEnumTypeByName("BlockKind").values}}


def file_stem(example_id: str) -> str:
    """The file name (before :data:`SUFFIX`) of ``example_id``: the id itself when it is a safe file name
    (letters, digits, ``._-``, not starting with ``.``), else its percent-encoding (RFC 3986, every byte but
    ``A-Za-z0-9_.-~`` as ``%XX``, a leading ``.`` too), so ``tldr:am:0`` is ``tldr%3Aam%3A0``. A safe id never
    holds ``%``, so :func:`id_of_stem` is the inverse. An encoding longer than a file name may be
    (255 bytes) is ``%%`` + the id's SHA-256 (hex); such a file's id is read from its message. foyle reads
    ``Example.id`` from the message, never from the name (``learner.go``)."""
    if _SAFE_ID.match(example_id):
        return example_id
    stem = quote(example_id, safe="")
    if stem.startswith("."):
        stem = "%2E" + stem[1:]
    if len(stem) + len(SUFFIX) > _NAME_MAX_BYTES:
        stem = _HASHED_PREFIX + hashlib.sha256(example_id.encode("utf-8")).hexdigest()
    return stem


def example_path(directory: str | os.PathLike[str], example_id: str) -> Path:
    """``<directory>/<file_stem(id)>.example.binpb`` (see :func:`file_stem`)."""
    return Path(directory) / f"{file_stem(example_id)}{SUFFIX}"


def example_bytes(example: Example, embedding: np.ndarray | None) -> bytes:
    """The serialized foyle ``Example`` of ``example``; ``embedding`` float32 ``(dim,)`` or None (left empty)."""
    c = message_classes()
    kinds = c["BlockKind"]
    message = c["Example"](
        id=example.id,
        embedding=[] if embedding is None else np.asarray(embedding, dtype=np.float32).tolist(),
        query=c["Doc"](blocks=[c["Block"](kind=kinds["MARKUP"], language="markdown", contents=example.query)]),
        answer=[c["Block"](kind=kinds["CODE"], language=example.language, contents=example.answer)],
    )
    return message.SerializeToString(deterministic=True)


def ids_on_disk(directory: str | os.PathLike[str]) -> list[str]:
    """Ids of the ``*.example.binpb`` files in ``directory`` (none when it does not exist): decoded from
    the name (:func:`file_stem`'s inverse), or read from the message of a hashed name (skipped when the
    file does not parse: it is not one of ours)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    ids = []
    for path in root.iterdir():
        if not path.name.endswith(SUFFIX):
            continue
        stem = path.name[: -len(SUFFIX)]
        if not stem.startswith(_HASHED_PREFIX):
            ids.append(unquote(stem))
            continue
        with contextlib.suppress(OSError, DecodeError):
            ids.append(message_classes()["Example"].FromString(path.read_bytes()).id)
    return sorted(ids)


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically unless it already holds exactly that; True when written."""
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    return True


def remove(path: Path) -> bool:
    """Delete ``path`` (and fsync its directory); True when it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True
