"""The base model's greedy answers to a fixed prompt pool, kept in the model cache between evaluations.

The base never changes while its adapter does: ``answer_retention`` asks the base the same general questions
at every evaluation of every version, and on SmolLM2 those base answers are about two thirds of the probe's
time (130 prompts × 32 greedy tokens; the adapter answers only the ones the base got right). A
:class:`BaseAnswerStore` keeps them: ``View.answers(..., persist=True)`` on the base view reads its answers
here when this base, on this device and dtype, already answered exactly these prompt ids with these token
budgets and ``top_k``, and writes them here after generating them otherwise.

One file a key, ``<directory>/base-answers-<sha256[:16]>.npz`` (numpy's ``.npz``, written atomically: temp
file, fsync, rename): the key is the SHA-256 of ``[CACHE_VERSION, base identity, device, dtype, prompts,
budgets, top_k]``, stored whole in the file and checked on reading. Arrays: ``digest`` (the key's hex),
``lengths`` int64 ``(N,)`` and ``tokens`` int64 ``(Σ lengths,)`` (the answers' new token ids, concatenated),
``dist_ids`` int64 ``(N, k)`` and ``dist_logprobs`` float64 ``(N, k)`` (the top-k next-token distribution after
each prompt, nats), ``vocab_size`` int64. A prompt set is one file per base and document system prompt (the
prompts are rendered ids), about 4 KB a prompt at ``top_k`` 256. A file that cannot be read, or holds
another key, is a miss: logged, generated again and replaced; one that cannot be written is logged and
skipped (a cache never fails an evaluation).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from learnerd.ml.divergence import TokenDist
from learnerd.store.atomic import write_cache_file

log = structlog.get_logger(__name__)

CACHE_VERSION = 1

Answers = tuple[list[list[int]], list[TokenDist]]
"""What :meth:`learnerd.eval.backend.View.answers` returns: each prompt's new token ids (EOS excluded), and
the top-k distribution after each prompt."""


@dataclass(frozen=True)
class BaseAnswerStore:
    """Where the base ``base_identity``'s answers are kept: ``directory`` (the model cache, created on the
    first write, mode 0700)."""

    directory: Path
    base_identity: str

    def key(
        self, placement: tuple[str, str], prompts: Sequence[Sequence[int]], budgets: Sequence[int], top_k: int
    ) -> str:
        """The SHA-256 hex digest naming the answers of this base on ``placement`` (device, dtype) to
        ``prompts`` (token ids) with ``budgets`` (new tokens each) and ``top_k``."""
        raw = [CACHE_VERSION, self.base_identity, *placement, [list(p) for p in prompts], list(budgets), top_k]
        return hashlib.sha256(json.dumps(raw, separators=(",", ":")).encode()).hexdigest()

    def path(self, digest: str) -> Path:
        """The file of the key ``digest``."""
        return self.directory / f"base-answers-{digest[:16]}.npz"

    def load(self, digest: str) -> Answers | None:
        """The answers stored under ``digest``; None when there are none, or when the file is unreadable or
        holds another key (logged as ``base_answers.unreadable``)."""
        path = self.path(digest)
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["digest"]) != digest:
                    raise ValueError("stored for another key")
                lengths, tokens = data["lengths"], data["tokens"]
                ids, logprobs, vocab = data["dist_ids"], data["dist_logprobs"], int(data["vocab_size"])
            if int(lengths.sum()) != tokens.size or not len(lengths) == len(ids) == len(logprobs):
                raise ValueError("arrays of inconsistent shapes")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError) as exc:
            log.warning("base_answers.unreadable", path=str(path), error=str(exc))
            return None
        ends = np.cumsum(lengths)
        answers = [tokens[end - n : end].tolist() for n, end in zip(lengths, ends, strict=True)]
        dists = [TokenDist(i.astype(np.int64), v.astype(np.float64), vocab) for i, v in zip(ids, logprobs, strict=True)]
        return answers, dists

    def save(self, digest: str, answers: Answers) -> None:
        """Keep ``answers`` under ``digest``, atomically. A store that cannot be written (no space, a read-only
        model cache) is logged as ``base_answers.unwritable`` and skipped: the evaluation goes on without it."""
        ids, dists = answers
        buffer = io.BytesIO()
        np.savez(
            buffer,
            digest=np.array(digest),
            lengths=np.array([len(a) for a in ids], dtype=np.int64),
            tokens=np.array([t for a in ids for t in a], dtype=np.int64),
            dist_ids=np.stack([d.token_ids for d in dists]).astype(np.int64),
            dist_logprobs=np.stack([d.logprobs for d in dists]).astype(np.float64),
            vocab_size=np.array(dists[0].vocab_size if dists else 0, dtype=np.int64),
        )
        write_cache_file(self.path(digest), buffer.getvalue(), "base_answers.unwritable")
