"""The reconcilers' sections: ``[examples]``, ``[probes]``, ``[export.*]``, and how their
controllers run (``[workqueue]``'s rate limiter, ``[controllers.NAME]``: workers, timeout, retries)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from learnerd.sections import Section, relative_to_the_file


class ExamplesConfig(Section):
    """How blocks become examples (learnerd.reconcilers.examples)."""

    learn_only_corrections: bool = False
    """foyle's original rule: learn only when executed != generated"""
    max_query_chars: int = Field(2000, ge=1, le=100_000)
    """longer contexts are cut to their last this many characters"""
    max_answer_chars: int = Field(16_000, ge=1, le=100_000)
    """a longer executed cell is not learned (a probe section must fit a document)"""


class ProbesConfig(Section):
    """Where learned examples become ### Q !probe sections."""

    document: str = Field("learned.dlm", min_length=1)
    """relative to the first docs_dirs entry (else <state_dir>/docs), or absolute"""
    by_language: dict[str, str] = Field(default_factory=dict)
    """example language -> document, e.g. { python = "python.dlm" }"""
    base_model: str = Field("learnerd/tiny-llama", min_length=1)
    """base_model of a document learnerd creates: built-in or a local HF model dir"""
    broken_document_retry_s: float = Field(60.0, gt=0)
    """re-check a document that does not parse this often"""
    rewrite_interval_s: float = Field(1.0, ge=0)
    """a document is rewritten at most this often: a burst of examples is one write"""
    rollover_bytes: int = Field(12 * 1024 * 1024, ge=16 * 1024, le=12 * 1024 * 1024)
    """a document this large gets no new sections: they go to <name>-2.dlm, -3, ..."""

    @field_validator("by_language")
    @classmethod
    def _no_empty_document(cls, value: dict[str, str]) -> dict[str, str]:
        if not all(value.values()):
            raise ValueError("probes.by_language: document names must not be empty")
        return value


class WorkqueueConfig(Section):
    """client-go's DefaultControllerRateLimiter.

    Rate-limiter settings of every workqueue; defaults are client-go's ``DefaultControllerRateLimiter``.
    """

    base_delay_s: float = Field(0.005, gt=0)
    """a failed key's first backoff; it doubles with each failure ..."""
    max_delay_s: float = Field(1000.0, gt=0)
    """... up to this many seconds"""
    qps: float = Field(10.0, gt=0)
    """the token bucket shared by all keys: requeues per second ..."""
    burst: int = Field(100, ge=1)
    """... and its burst"""

    @model_validator(mode="after")
    def _delays_ordered(self) -> WorkqueueConfig:
        if self.base_delay_s > self.max_delay_s:
            raise ValueError(
                f"workqueue: need base_delay_s <= max_delay_s, not {self.base_delay_s} > {self.max_delay_s}"
            )
        return self


class ControllerConfig(Section):
    """One table per controller; its defaults come from the reconciler's spec.

    One ``[controllers.NAME]`` table per reconciler spec (:data:`learnerd.daemon.controllers.CONTROLLERS`).
    """

    workers: int = Field(2, ge=1)
    """keys reconciled at once"""
    timeout_s: float = Field(60.0, gt=0)
    """a reconcile running longer is cancelled and requeued with backoff"""
    max_retries: int = Field(15, ge=0)
    """failures of one key before it is dropped (logged and counted)"""


class FoyleExportConfig(Section):
    """foyle's Example protobuf files (<id>.example.binpb), off by default.

    A relative ``dir`` is resolved against the config file's directory.
    """

    dir: str = ""
    """e.g. "~/.foyle/training"; needs foyle's embedding model (backend "openai")"""

    @field_validator("dir")
    @classmethod
    def _dir_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        return relative_to_the_file(value, info)


class VllmExportConfig(Section):
    """vLLM's LoRA resolver layout: <dir>/<document>@vNNNN/ per adapter version and a <dir>/<document> alias.

    Off by default. A relative ``dir`` is resolved against the config file's directory. ``servers`` are
    vLLM servers' root URLs (``http://host:8000``, started with ``--enable-lora`` and
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): each new version is loaded there with
    ``POST /v1/load_lora_adapter`` under its versioned name, each version dropped from ``dir`` unloaded.
    """

    dir: str = ""
    """e.g. "/srv/vllm/loras" (vLLM's VLLM_LORA_RESOLVER_CACHE_DIR); empty: off"""
    keep: int = Field(3, ge=1)
    """versions kept per document (the alias's target always among them); older ones are removed"""
    base_model_name: str = ""
    """the base model's name on the vLLM servers (its --served-model-name), written as the adapters'
    base_model_name_or_path: vLLM's filesystem resolver loads only adapters naming it; empty: peft's own"""
    servers: list[str] = Field(default_factory=list)
    """vLLM servers told of each version, e.g. ["http://gpu1:8000"]; empty: files only"""
    token_env: str = Field("VLLM_API_KEY", min_length=1)
    """the environment variable holding the servers' bearer token (vLLM's --api-key); unset: no token"""
    timeout_s: float = Field(10.0, gt=0)
    """one call to a server gives up after this many seconds"""
    retry_base_s: float = Field(1.0, gt=0)
    """a failed call is retried after this many seconds, doubling per failure ..."""
    retry_max_s: float = Field(300.0, gt=0)
    """... up to this many seconds between tries (retried until it succeeds)"""

    @field_validator("dir")
    @classmethod
    def _dir_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        return relative_to_the_file(value, info)

    @field_validator("servers")
    @classmethod
    def _server_roots(cls, value: list[str]) -> list[str]:
        roots = []
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/") or parts.query:
                raise ValueError(f"[export.vllm] servers: {url!r} is not a root URL (http://host:port, no /v1)")
            roots.append(f"{parts.scheme}://{parts.netloc}")
        return roots

    @model_validator(mode="after")
    def _retry_range(self) -> VllmExportConfig:
        if self.retry_max_s < self.retry_base_s:
            raise ValueError("retry_max_s must be at least retry_base_s")
        return self


class GgufExportConfig(Section):
    """llama.cpp's GGUF LoRA files: <dir>/<document>@vNNNN.gguf per adapter version, a <dir>/<document>.gguf
    alias, and the base model's own GGUF file beside them when the base came from one (SmolLM2).

    Off by default. A relative ``dir`` is resolved against the config file's directory. Llama-architecture
    bases only (docs/export.md).
    """

    dir: str = ""
    """e.g. "~/models/learnerd"; empty: off"""
    keep: int = Field(3, ge=1)
    """versions kept per document (the alias's target always among them); older ones are removed"""

    @field_validator("dir")
    @classmethod
    def _dir_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        return relative_to_the_file(value, info)


class ExportConfig(Section):
    """Copies of what learnerd learned in other tools' formats."""

    foyle: FoyleExportConfig = Field(default_factory=FoyleExportConfig)
    vllm: VllmExportConfig = Field(default_factory=VllmExportConfig)
    gguf: GgufExportConfig = Field(default_factory=GgufExportConfig)
