"""llama.cpp's next-token logits beside transformers' on the same prompt, at float32 precision: the check of
``tests/integration/test_ml_gguf_base.py`` (one prompt) and ``benchmarks/bench_gguf_logits.py`` (many)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

LOGIT_RTOL = 2e-5
"""Largest |llama.cpp − transformers| next-token logit, as a fraction of the largest |logit|: both run float32
(weights, activations, and llama.cpp's KV cache asked for float32: its float16 default alone moves logits by
~1e-3 of their scale), summing dot products of up to 1536 terms in different orders through 30 blocks; measured
2.3e-6 on SmolLM2-135M-Instruct, the bound is ~170 float32 epsilons (1.19e-7)."""


@dataclass(frozen=True)
class LogitAgreement:
    """One prompt's comparison: ``positions`` tokens; ``rel_error`` the largest |llama.cpp − transformers| logit
    over all positions and the vocabulary, divided by the largest |transformers logit|; ``clear`` the positions
    whose greedy token is no tie (top two transformers logits more than ``2 * LOGIT_RTOL`` of the scale apart);
    ``clear_argmax_agree`` how many of those both pick the same greedy token."""

    positions: int
    rel_error: float
    clear: int
    clear_argmax_agree: int


def chat_prompt(tokenizer: Any, question: str) -> str:
    """``question`` as one user turn in the tokenizer's chat template, with the generation prompt."""
    messages = [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def compare_logits(llama: Any, model: Any, ids: list[int]) -> LogitAgreement:
    """Every position's logits of token ids ``ids`` from ``llama`` (a ``llama_cpp.Llama`` made with
    ``logits_all=True``, float32 weights and KV cache) and ``model`` (a float32 transformers causal LM in eval
    mode), compared as :class:`LogitAgreement`."""
    import torch

    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    llama.reset()
    llama.eval(ids)
    got = np.asarray(llama.scores[: len(ids)])
    scale = float(np.abs(expected).max())
    top2 = np.sort(expected, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * LOGIT_RTOL * scale
    agree = got.argmax(-1) == expected.argmax(-1)
    return LogitAgreement(
        positions=len(ids),
        rel_error=float(np.abs(got - expected).max()) / scale,
        clear=int(clear.sum()),
        clear_argmax_agree=int(agree[clear].sum()),
    )
