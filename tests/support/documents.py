"""Helpers for training tests: .dlm documents of Q/A pairs, written the way a person would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from learnerd.store.dlm import new_document


def qa_document(
    path: Path,
    pairs: Sequence[tuple[str, str]],
    *,
    training: Mapping[str, Any] | None = None,
    base_model: str = "learnerd/tiny-llama",
    dlm_id: str | None = None,
) -> Path:
    """Write a document at ``path``: frontmatter (``base_model``, ``training``), then one ``::instruction::``
    section holding ``pairs``. Returns ``path``."""
    head = new_document(base_model, training=training, dlm_id=dlm_id, path=path).to_bytes()
    body = "::instruction::\n" + "".join(f"### Q\n{q}\n\n### A\n{a}\n\n" for q, a in pairs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head + body.encode())
    return path
