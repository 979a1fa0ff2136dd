"""``[steering]``: ``learnerd evolve``'s per-cluster logit deltas (:mod:`learnerd.steering`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from learnerd.sections import Section, relative_to_the_file


class EvolutionSettings(Section):
    """The evolution loop's knobs (:func:`learnerd.steering.evolve.run_evolution`): lengths in tokens,
    deltas in logits. :class:`SteeringConfig` (``[steering]``) adds the rest of ``learnerd evolve``'s."""

    iterations: int = Field(20, ge=1)
    """iterations of a run (a resumed run continues to this total)"""
    minibatch_size: int = Field(8, ge=1)
    """pool questions answered per iteration"""
    scale: float = Field(100.0, gt=0)
    """tokens: shortness = 1 / (1 + mean_len / scale)"""
    delta_bound: float = Field(10.0, gt=0)
    """every delta must lie in [-bound, bound] (logits)"""
    max_new_tokens: int = Field(128, ge=1)
    """longest answer generated (tokens)"""
    seed: int = 0
    """k-means, minibatch sampling and the offline reflector"""


class SteeringConfig(EvolutionSettings):
    """`learnerd evolve`: per-cluster logit deltas (learnerd.steering).

    ``learnerd evolve``'s settings (see :mod:`learnerd.steering.evolve`); lengths in tokens, deltas in logits.
    """

    clusters: int = Field(10, ge=1, le=1000)
    """K: k-means clusters of the vocabulary, numbered 2..K+1 (0 = EOS, 1 = numbers)"""
    pca_dim: int = Field(32, ge=1)
    """embedding dimensions kept by PCA before k-means"""
    pool: str = ""
    """JSONL of {question, answer} rows; "" = the document's probes"""
    reflector: Literal["offline", "openai"] = "offline"
    """or "openai" (any OpenAI-compatible chat-completions endpoint)"""
    reflector_base_url: str = ""
    """"" = the openai client's default (api.openai.com)"""
    reflector_model: str = "gpt-4o"
    """the reflector endpoint's model name"""
    reflector_max_attempts: int = Field(3, ge=1)
    """requests per iteration before an invalid reply is an error"""
    offline_step: float = Field(1.0, gt=0)
    """the offline reflector's initial step size (logits)"""
    judge: Literal["match", "llm"] = "match"
    """or "llm" (an OpenAI-compatible endpoint judges each answer)"""
    judge_base_url: str = ""
    """"" = the openai client's default (api.openai.com)"""
    judge_model: str = "gpt-4o"
    """the judge endpoint's model name"""
    numeric_tolerance: float = Field(0.01, ge=0, lt=1)
    """relative tolerance of the match judge's number comparison"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the reflector's and judge's key"""

    @field_validator("pool")
    @classmethod
    def _pool_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        return relative_to_the_file(value, info)
