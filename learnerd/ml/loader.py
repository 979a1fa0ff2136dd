"""Every model load of the process behind one lock, and the known-answer check after each load.

**Why one lock.** transformers' ``from_pretrained`` is not thread-safe. While it builds a model it swaps
process-wide state for its own and puts the saved value back when it is done:
``PreTrainedModel.tie_weights`` becomes a no-op (``transformers.initialization.no_tie_weights``), torch's
default dtype is set to the load's (``local_torch_dtype``), ``torch.linspace`` and ``torch.nn.init``'s
functions are replaced (``meta_device_safe_creation_ops``, ``guard_torch_init_functions``). Two loads in
two threads interleave those swaps:

* the load that finishes while the other is still building calls ``tie_weights`` to tie its output
  head to its input embeddings — and gets the no-op. A model with tied embeddings (SmolLM2:
  ``lm_head.weight`` *is* ``model.embed_tokens.weight``) keeps ``lm_head.weight`` on the meta device
  (transformers never materialises a tied weight, and logs ``lm_head.weight | MISSING`` "newly
  initialized"); on the CPU a forward pass then multiplies by uninitialised memory: garbage text;
* the thread that entered second saved the first one's no-op as "the original" and restores it last,
  so ``tie_weights`` stays a no-op for the rest of the process: every later load of a tied model —
  each reload, each evaluation — is broken the same way, until the process restarts.

peft's adapter loads inject LoRA layers into the model they are given (mutating it in place) and run
torch's init functions; converting a GGUF file and building the built-in tiny model are transformers
model constructions too (and two threads converting one file would both convert it). So every one of
them — :func:`load_pretrained` (base models, GGUF conversion), :func:`load_adapter` (peft), and inside
:func:`loading` the tiny model's build, a new LoRA adapter for training and the embedder's load — holds
this module's one re-entrant lock. Loads wait for each other (seconds); generation and evaluation on models
already loaded do not wait.

**The adapter's files** are checked against the hashes recorded when its version was committed
(:meth:`~learnerd.store.adapters.AdapterVersion.verify`) before peft reads them: a damaged adapter fails its
load (:class:`ModelCheckError`) whatever its values.

**The known-answer check** (:func:`check_model`) runs after every load, before the model is returned:
nothing was newly initialised, nothing is left on the meta device, tied weights are one tensor, and
the logits over a fixed prompt are finite and the same twice. A model that fails it raises
:class:`ModelCheckError` and must be discarded; loading it again may succeed.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from learnerd.ml.device import Placement
from learnerd.store.adapters import AdapterIntegrityError, AdapterVersion

_LOCK = threading.RLock()
CHECK_TOKENS = 8
"""Length of the fixed prompt of :func:`check_model` (token ids spread over the vocabulary)."""
CHECK_TOLERANCE = 1e-3
"""Two forward passes over the fixed prompt must agree within this (absolute and relative, logits)."""


class ModelCheckError(RuntimeError):
    """A loaded model failed its known-answer check (:func:`check_model`): do not use it. Not a
    :class:`~learnerd.ml.base_model.BaseModelError`: the model may be fine, and loading it again may pass."""


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Hold the process-wide model-loading lock for the ``with`` block (re-entrant: a load inside a
    conversion is fine). Wrap in it anything that calls ``from_pretrained``, builds a transformers model
    or loads a peft adapter; :func:`load_pretrained` and :func:`load_adapter` take it themselves."""
    with _LOCK:
        yield


def load_pretrained(
    path: str | os.PathLike[str], *, placement: Placement | None = None, gguf_file: str | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the Hugging Face model directory ``path`` — or of its GGUF file
    ``gguf_file``, dequantised — offline, without remote code, in eval mode, on ``placement`` (default:
    CPU, float32), loaded under :func:`loading` and checked by :func:`check_model`.

    Raises:
        ModelCheckError: the loaded model failed its known-answer check.
        OSError, ValueError, KeyError, RuntimeError: transformers cannot load it (its own errors; a GGUF
            reader raises others too).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    options: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
    if gguf_file is not None:
        options["gguf_file"] = gguf_file
    with loading():
        tokenizer = AutoTokenizer.from_pretrained(path, **options)
        model, info = cast(  # with output_loading_info, a pair (transformers annotates the model alone)
            tuple[Any, dict[str, Any]],
            AutoModelForCausalLM.from_pretrained(
                path, dtype=placement.dtype if placement else torch.float32, output_loading_info=True, **options
            ),
        )
        if placement is not None and placement.device != "cpu":
            model = model.to(placement.device)
        model.eval()
        check_model(model, missing_keys=info["missing_keys"])
    return model, tokenizer


def load_adapter(
    model: Any, adapter: AdapterVersion | str | os.PathLike[str], *, name: str = "default", trainable: bool = False
) -> Any:
    """Load the peft adapter ``adapter`` (a committed version, or an adapter directory) onto ``model`` as
    ``name``, make it the active adapter, and check the result (:func:`check_model`), under :func:`loading`.

    ``model`` is either a base model — the one the adapter was trained on (see
    ``metadata().base_model_identity``); peft injects the LoRA layers into it in place and wraps it in a
    new ``PeftModel`` — or a ``PeftModel``, which gains one more adapter.

    Returns:
        the ``PeftModel`` (eval mode unless ``trainable``); ``disable_adapter()`` gives the base's view.

    Raises:
        ModelCheckError: a committed version's files differ from the hashes recorded at its commit (``model`` is
            unchanged then), or the model with the adapter failed the check (discard the model: it was changed).
        OSError, ValueError: peft cannot load the adapter directory.
    """
    from peft import PeftModel

    if isinstance(adapter, AdapterVersion):
        try:
            adapter.verify()
        except AdapterIntegrityError as exc:
            raise ModelCheckError(str(exc)) from exc
    path = str(adapter.path if isinstance(adapter, AdapterVersion) else Path(adapter))
    with loading():
        if isinstance(model, PeftModel):
            model.load_adapter(path, adapter_name=name, is_trainable=trainable)
            model.set_adapter(name)
            peft_model = model
        else:
            peft_model = PeftModel.from_pretrained(model, path, adapter_name=name, is_trainable=trainable)
        if not trainable:
            peft_model.eval()
        check_model(peft_model)
    return peft_model


def check_model(model: Any, *, missing_keys: Iterable[str] = ()) -> None:
    """The known-answer check of a freshly loaded causal LM (or ``PeftModel``), in that order:

    1. no weight was newly initialised by the load (``missing_keys``: transformers' loading info);
    2. no parameter or buffer is on the meta device (never materialised);
    3. every tied pair of weights (``all_tied_weights_keys``, e.g. ``lm_head.weight`` →
       ``model.embed_tokens.weight``) is one tensor;
    4. two forward passes over a fixed prompt (:data:`CHECK_TOKENS` ids spread over the vocabulary) give
       finite logits that agree within :data:`CHECK_TOLERANCE` — a weight read from uninitialised memory
       overflows or changes between passes.

    Raises:
        ModelCheckError: naming the first violation.
    """
    import torch

    missing = sorted(missing_keys)
    if missing:
        raise ModelCheckError(f"the load left {len(missing)} weight(s) newly initialized: {', '.join(missing[:3])}")
    for name, tensor in (*model.named_parameters(), *model.named_buffers()):
        if tensor.is_meta:
            raise ModelCheckError(f"{name} is on the meta device: it was never loaded")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for target, source in (getattr(base, "all_tied_weights_keys", None) or {}).items():
        if base.get_parameter(target).data_ptr() != base.get_parameter(source).data_ptr():
            raise ModelCheckError(f"{target} is not tied to {source}")
    vocab = int(model.get_input_embeddings().weight.shape[0])
    ids = torch.tensor([[(k * 7919) % vocab for k in range(1, CHECK_TOKENS + 1)]], device=model.device)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            first, second = (model(input_ids=ids).logits.float().cpu() for _ in range(2))
    finally:
        model.train(training)
    if not bool(torch.isfinite(first).all()):
        raise ModelCheckError(f"{int((~torch.isfinite(first)).sum())} non-finite logit(s) over the check prompt")
    if not torch.allclose(first, second, rtol=CHECK_TOLERANCE, atol=CHECK_TOLERANCE):
        raise ModelCheckError("two forward passes over the check prompt disagree: a weight is uninitialised memory")
