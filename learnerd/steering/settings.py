"""``[steering]``: ``learnerd evolve``'s per-cluster logit deltas (:mod:`learnerd.steering`)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

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
    cluster_bounds: dict[int, tuple[float, float]] = Field(default_factory=dict)
    """per-cluster [low, high] (logits) in place of [-delta_bound, delta_bound], e.g. {0 = [0, 10]}: EOS only up"""
    max_new_tokens: int = Field(128, ge=1)
    """longest answer generated (tokens)"""
    seed: int = 0
    """k-means, minibatch sampling and the offline reflector"""

    @field_validator("cluster_bounds", mode="before")
    @classmethod
    def _toml_keys_are_strings(cls, value: object) -> object:
        """TOML and JSON keys are strings and arrays lists: ``{"0": [0, 10]}`` reads as ``{0: (0.0, 10.0)}``."""
        if not isinstance(value, dict):
            return value
        out = {}
        for key, interval in value.items():
            if isinstance(key, str) and key.strip().isdigit():
                key = int(key)
            if isinstance(interval, list | tuple) and len(interval) == 2:
                interval = tuple(float(v) if type(v) in (int, float) else v for v in interval)
            out[key] = interval
        return out

    @field_validator("cluster_bounds")
    @classmethod
    def _bounds_are_intervals(cls, value: dict[int, tuple[float, float]]) -> dict[int, tuple[float, float]]:
        for cid, (low, high) in value.items():
            if cid < 0 or not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(f"cluster_bounds: cluster {cid}'s [{low}, {high}] is not a finite [low, high]")
        return value

    def interval(self, cluster_id: int) -> tuple[float, float]:
        """``[low, high]`` (logits) a delta of ``cluster_id`` must lie in."""
        return self.cluster_bounds.get(cluster_id, (-self.delta_bound, self.delta_bound))


class ServerSettings(Section):
    """An inference server (SGLang, vLLM, ...) evolve restarts with each iteration's deltas.

    Set ``start`` and every iteration is answered through the server instead of in process: evolve stops
    the server it started, writes the iteration's deltas, starts ``start`` again, waits for ``health_url``
    and asks ``base_url``'s chat completions (:mod:`learnerd.steering.server`).
    """

    start: str = ""
    """shell command starting the server; {steering} = path of the iteration's steering file ("" = answer in process)"""
    health_url: str = ""
    """a GET answered 2xx once the server is ready (required with start)"""
    base_url: str = ""
    """OpenAI-compatible endpoint answering the minibatch; "" = health_url's scheme://host:port/v1"""
    model: str = "default"
    """model name sent with each chat completion"""
    stop_signal: Literal["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL"] = "SIGTERM"
    """sent to the server's process group to stop it (SIGKILL after stop_timeout_s)"""
    ready_timeout_s: float = Field(300.0, gt=0)
    """seconds from start until health_url must answer 2xx"""
    stop_timeout_s: float = Field(30.0, gt=0)
    """seconds the server may take to exit after stop_signal"""

    @model_validator(mode="after")
    def _health_url_with_start(self) -> ServerSettings:
        if self.start and not self.health_url:
            raise ValueError("server.start needs server.health_url (evolve waits for it before asking the server)")
        return self

    def chat_base_url(self) -> str:
        """``base_url``, or ``health_url``'s ``scheme://host:port/v1``."""
        if self.base_url:
            return self.base_url
        from urllib.parse import urlsplit

        parts = urlsplit(self.health_url)
        return f"{parts.scheme}://{parts.netloc}/v1"


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
    reflector: Literal["offline", "openai", "cma"] = "offline"
    """or "openai" (any OpenAI-compatible chat-completions endpoint), or "cma" (CMA-ES; pip install cma)"""
    reflector_base_url: str = ""
    """"" = the openai client's default (api.openai.com)"""
    reflector_model: str = "gpt-4o"
    """the reflector endpoint's model name"""
    reflector_max_attempts: int = Field(3, ge=1)
    """requests per iteration before an invalid reply is an error"""
    offline_step: float = Field(1.0, gt=0)
    """the offline and cma reflectors' initial step size (logits)"""
    cma_popsize: int = Field(0, ge=0)
    """candidates per CMA-ES generation (0 = cma's default, 4 + 3 ln(clusters + 2))"""
    judge: Literal["match", "llm"] = "match"
    """or "llm" (an OpenAI-compatible endpoint judges each answer)"""
    judge_base_url: str = ""
    """"" = the openai client's default (api.openai.com)"""
    judge_model: str = "gpt-4o"
    """the judge endpoint's model name"""
    numeric_tolerance: float = Field(0.01, ge=0, lt=1)
    """relative tolerance of the match judge's number comparison"""
    api_key_env: str = "OPENAI_API_KEY"
    """environment variable holding the reflector's, judge's and server's key"""
    server: ServerSettings = Field(default_factory=ServerSettings)

    @field_validator("pool")
    @classmethod
    def _pool_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        return relative_to_the_file(value, info)
