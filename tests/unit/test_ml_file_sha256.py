"""``file_sha256``: remembered per file identity, so checking SmolLM2's GGUF on every served request costs no
re-read, and never stale: a file replaced or rewritten in place is hashed again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from learnerd.ml.gguf_import import file_sha256


def test_the_digest_is_the_files_sha256_and_follows_every_change(tmp_path: Path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()

    replacement = tmp_path / "model.gguf.tmp"  # replaced by rename, as pip and atomic writers do
    replacement.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 64)
    os.replace(replacement, path)
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()

    before = path.stat()
    with path.open("r+b") as f:  # rewritten in place, same size and inode: the mtime differs
        f.write(b"FUGG")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_file_is_read_once(tmp_path: Path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" * 1000)
    reads = []
    real_open = open

    def counting_open(file, *args, **kwargs):
        reads.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    digests = {file_sha256(path) for _ in range(5)}
    assert digests == {hashlib.sha256(b"GGUF" * 1000).hexdigest()}
    assert reads.count(os.fspath(path.resolve())) == 1
