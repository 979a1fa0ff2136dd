"""Where a model runs: the ``device`` setting of training, evaluation and generation.

Accepted values: ``auto`` (CUDA when ``torch.cuda.is_available()``, else CPU), ``cpu``, ``cuda`` and
``cuda:N``. On CUDA the weights are bfloat16 where the GPU supports it (``torch.cuda.is_bf16_supported()``),
else float16; on CPU they are float32. LoRA adapter weights stay float32 (peft's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from learnerd.ml.settings import DEVICE_CHOICES, DEVICE_PATTERN


class DeviceError(ValueError):
    """The device setting is malformed, or names a GPU this machine does not have."""


@dataclass(frozen=True)
class Placement:
    """A resolved device: ``device`` (``"cpu"`` or ``"cuda:N"``) and the weights' ``dtype`` (a torch dtype)."""

    device: str
    dtype: Any


def check_device(spec: str) -> str:
    """``spec`` if it is a well-formed device setting (no hardware is checked).

    Raises:
        DeviceError: anything but ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    """
    if not isinstance(spec, str) or not DEVICE_PATTERN.fullmatch(spec):
        raise DeviceError(f"device {spec!r} is not one of {DEVICE_CHOICES}")
    return spec


def resolve_device(spec: str = "cpu") -> Placement:
    """The :class:`Placement` for a device setting.

    Raises:
        DeviceError: ``spec`` is malformed, or names CUDA (or GPU N) that ``torch.cuda`` does not see;
            the one-line message says to set the device to ``cpu`` or ``auto``.
    """
    import torch

    check_device(spec)
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return Placement("cpu", torch.float32)
    if not torch.cuda.is_available():
        raise DeviceError(
            f'device {spec!r}: torch sees no CUDA GPU (torch {torch.__version__}); set device = "cpu" or "auto"'
        )
    index = int(spec.split(":")[1]) if ":" in spec else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise DeviceError(
            f'device {spec!r}: only {torch.cuda.device_count()} CUDA GPU(s) visible; set device = "cuda:0" … or "auto"'
        )
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return Placement(f"cuda:{index}", dtype)
