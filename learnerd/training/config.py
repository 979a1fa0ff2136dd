"""What learnerd's trainer can do with a document's ``training`` block.

The block itself — dlm's field names, defaults and ranges, plus learnerd's ``max_steps`` — is defined
once, in :class:`learnerd.store.dlm.TrainingConfig`. dlm accepts more than learnerd trains: a QLoRA
adapter and the 8-bit / GaLore optimizers need bitsandbytes and a GPU, and learnerd trains on CPU.
:func:`check_trainable` refuses those, and the keys that neither dlm nor learnerd knows (typos).
Accepted but not acted on: ``precision`` (the device picks the dtype: float32 on CPU, bfloat16 on CUDA
where supported; :mod:`learnerd.ml.device`) and dlm's non-adapter keys
(``preference``, ``cpt``, ``adapters``, ``sources``, ...).
"""

from __future__ import annotations

from learnerd.store.dlm import TrainingConfig, TrainingConfigError

TRAINABLE_ADAPTERS = ("lora", "dora")
TRAINABLE_OPTIMIZERS = ("adamw_torch",)


def check_trainable(config: TrainingConfig) -> TrainingConfig:
    """Return ``config`` if learnerd can train it.

    Raises:
        TrainingConfigError: an unknown key (``unknown key(s) in training: lora_rank``), or an
            ``adapter`` / ``optimizer`` learnerd cannot train on CPU; the message names the key.
    """
    unknown = config.unknown_keys()
    if unknown:
        raise TrainingConfigError(f"unknown key(s) in training: {', '.join(unknown)}", key=unknown[0])
    if config.adapter not in TRAINABLE_ADAPTERS:
        raise TrainingConfigError(
            f"training.adapter {config.adapter!r} needs a GPU; learnerd trains {' or '.join(TRAINABLE_ADAPTERS)}",
            key="adapter",
        )
    if config.optimizer not in TRAINABLE_OPTIMIZERS:
        raise TrainingConfigError(
            f"training.optimizer {config.optimizer!r} needs a GPU; learnerd trains with "
            f"{' or '.join(TRAINABLE_OPTIMIZERS)}",
            key="optimizer",
        )
    return config
