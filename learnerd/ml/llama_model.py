"""llama.cpp models as learnerd opens them: ``llama_cpp.Llama`` without ggml's CPU extra buffer types.

ggml's CPU backend may hold a quantised model's weights in extra buffer types (AMX tiles, repacked blocks)
chosen from the CPU's features. On a host that advertises AMX (``amx_int8``, ``amx_tile``), llama-cpp-python
0.3.36 built there crashed the process (SIGSEGV in ``llama_decode``) at the first forward pass of SmolLM2's
Q4_1 GGUF; with ``llama_model_params.use_extra_bufts = false`` (llama-server's ``--no-repack``) it answers.
learnerd opens every model that way: a crash takes the daemon down, while the extra buffers are only a speed-up
(not measured here with them off against on).
"""

from __future__ import annotations

import os
import threading
from typing import Any

_DEFAULTS = threading.Lock()  # llama-cpp-python reads its parameter defaults from a module function


def open_llama(model_path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """``llama_cpp.Llama(model_path=model_path, **kwargs)`` with ``use_extra_bufts`` false: the weights stay in
    the CPU's plain buffers (``kwargs``: ``Llama``'s own, e.g. ``n_ctx`` in tokens, ``n_threads``).

    Raises:
        ImportError: llama-cpp-python is not installed (the ``llamacpp`` extra).
        ValueError: llama.cpp cannot load ``model_path`` (llama-cpp-python's error).
    """
    from llama_cpp import Llama
    from llama_cpp import llama as llama_module

    library = llama_module.llama_cpp
    defaults = library.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    with _DEFAULTS:
        library.llama_model_default_params = without_extra_buffers
        try:
            return Llama(model_path=os.fspath(model_path), **kwargs)
        finally:
            library.llama_model_default_params = defaults
