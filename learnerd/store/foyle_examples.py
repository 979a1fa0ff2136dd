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

import functools
import os
import re
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from learnerd.store.atomic import atomic_write_bytes, fsync_dir
from learnerd.store.examples import Example

#: foyle's file name suffix (``learner.go``'s ``fileSuffix``).
SUFFIX = ".example.binpb"
PROTO_ROOT = Path(__file__).parent / "foyle_proto"
TRAINER_PROTO = "foyle/v1alpha1/trainer.proto"
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,200}$")


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


def example_path(directory: str | os.PathLike[str], example_id: str) -> Path | None:
    """``<directory>/<id>.example.binpb``, or None when the id is not a safe file name."""
    return Path(directory) / f"{example_id}{SUFFIX}" if _SAFE_ID.match(example_id) else None


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
    """Ids of the ``*.example.binpb`` files in ``directory`` (none when it does not exist)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(p.name[: -len(SUFFIX)] for p in root.iterdir() if p.name.endswith(SUFFIX))


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
