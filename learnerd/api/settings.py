"""The HTTP surfaces' sections: ``[admin]`` (metrics, search), ``[rpc]`` (live probe injection) and
``[serve]`` (the OpenAI-compatible endpoint), their addresses' grammar and their tokens' variables."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from learnerd.sections import ConfigError, Section

RPC_TOKEN_ENV = "LEARNERD_PROBE_TOKEN"
"""The environment variable holding the RPC server's bearer token (dlm's is ``DLM_PROBE_TOKEN``), overriding the
token file's (:mod:`learnerd.api.tokens`)."""

OPENAI_TOKEN_ENV = "LEARNERD_OPENAI_TOKEN"
"""The environment variable holding the OpenAI-compatible endpoint's bearer token, overriding the token file's."""


def parse_host_port(text: str, where: str = "address") -> tuple[str, int]:
    """``"127.0.0.1:9464"`` → ``("127.0.0.1", 9464)``; ``"[::1]:9464"`` → ``("::1", 9464)``. Port 0 lets
    the kernel choose a free port (``learnerd ctl status`` shows which).

    Raises:
        ConfigError: not ``HOST:PORT`` with a port in 0..65535.
    """
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where} must be HOST:PORT (e.g. 127.0.0.1:9464), not {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``): only this machine's users
    reach it."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_port_or_empty(section: str) -> classmethod[Any, Any, str]:
    """A field validator: ``""`` or a valid ``HOST:PORT``."""

    def check(cls: type, value: str, info: ValidationInfo) -> str:
        if value:
            parse_host_port(value, f"{section}.{info.field_name}")
        return value

    return classmethod(check)


class AdminConfig(Section):
    """The admin socket is always <state_dir>/learnerd.sock.

    The optional TCP endpoints beside the admin socket, and limits on what requests may ask.
    """

    metrics_addr: str = ""
    """HOST:PORT serving GET /metrics over TCP ("" = off); --metrics-addr"""
    search_addr: str = ""
    """HOST:PORT serving POST /search over TCP behind a bearer token; --listen-search"""
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    """request bodies larger than this are refused (413)"""
    max_k: int = Field(100, ge=1)
    """the largest k a search may ask for"""

    _addresses = field_validator("metrics_addr", "search_addr")(_host_port_or_empty("admin"))


class RpcConfig(Section):
    """Live probe injection (dlm's inject_probe); --listen-rpc HOST:PORT.

    The probe-injection RPC server (``learnerd.api.rpc``). ``listen`` is ``HOST:PORT`` (empty: off).
    """

    listen: str = ""
    """HOST:PORT; empty: no RPC server. Token: the token file or $LEARNERD_PROBE_TOKEN"""
    document: str = ""
    """the document injected probes go to; empty: the [probes] document"""
    capacity: int = Field(1000, ge=1)
    """probes accepted but not yet written into the document; beyond: HTTP 429"""

    _listen = field_validator("listen")(_host_port_or_empty("rpc"))

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``listen``, or None when the server is off."""
        return parse_host_port(self.listen, "rpc.listen") if self.listen else None


class ServeConfig(Section):
    """OpenAI-compatible serving (learnerd.api.openai_app); --listen-openai HOST:PORT.

    Serves through :mod:`learnerd.ml.serving`; sizes in tokens and bytes.
    """

    listen: str = ""
    """HOST:PORT; empty: off. Adapters need the token (token file or $LEARNERD_OPENAI_TOKEN)"""
    base_models: list[str] = Field(default_factory=list)
    """base models served besides the documents' own (the random tiny model only if named)"""
    queue_size: int = Field(16, ge=1)
    """chat completions queued or generating; beyond: HTTP 429 with Retry-After"""
    max_tokens: int = Field(512, ge=1)
    """a request's max_tokens is clamped to this many tokens"""
    max_body_bytes: int = Field(1024 * 1024, ge=1024)
    """larger request bodies are refused (413)"""
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    """the temperature of a request that sends none (0 = greedy: the same answer each time; OpenAI's own default,
    1.0, makes a small model wander off the command it learned)"""
    rag_k: int = Field(3, ge=0)
    """retrieved examples quoted in the system message of a document's request, those at least the routing
    threshold similar (0 = off; per request: learnerd.rag_k); retrieval needs the token, and documents of a
    pretrained base train under rag_k retrieved examples unless their training block says otherwise"""
    context_alpha: float = Field(0.5, ge=0.0, le=4.0)
    """context-aware decoding's alpha for a request the base answers under retrieved examples: scores (1 + alpha)
    log p(y | examples, request) - alpha log p(y | request), so the answer copies a quoted example rather than what
    the model recalls (0 = off; transformers backend only; docs/operations.md, Context-aware decoding)"""
    choose_quoted: bool = True
    """a greedy answer under retrieved examples carries the quoted command the model finds about as likely as its own
    (within choice_margin nats per token) in its command's place; transformers backend only (docs/operations.md,
    Choosing a quoted command)"""
    choice_margin: float = Field(0.5, ge=0.0, le=10.0)
    """nats per token a quoted command's mean log-probability may lie below the model's own command's and replace it
    (0.5: its geometric-mean token probability at least e^-0.5 = 0.61 times the model's own)"""
    steering: bool = False
    """apply `learnerd evolve`'s deltas_best.json of the document's run, when there is one"""
    num_threads: int = Field(0, ge=0)
    """threads while generating (torch's, or llama.cpp's n_threads); 0 = the free cores minus one (at least 1)"""
    backend: Literal["transformers", "llamacpp"] = "transformers"
    """or "llamacpp": generate with llama.cpp on the base's GGUF file and the version's GGUF LoRA (docs/export.md)"""
    routing: Literal["similarity", "always-adapter"] = "similarity"
    """who answers a document's request: "similarity" = its adapter when the last user message is at least the
    version's threshold similar to a question it learned, else the base (a task logged since the version too), and
    only examples over the threshold are quoted (docs/operations.md, Routing); "always-adapter" = its adapter, quoted
    the rag_k nearest. The promotion gate judges what this serves"""

    _listen = field_validator("listen")(_host_port_or_empty("serve"))

    @property
    def served_context_alpha(self) -> float:
        """The context-aware decoding α the endpoint applies: ``context_alpha`` on the transformers backend, 0 on
        llama.cpp's (no second context per request)."""
        return self.context_alpha if self.backend == "transformers" else 0.0

    @property
    def served_choice_margin(self) -> float | None:
        """The margin (nats per token) at which the endpoint's greedy answers under retrieved examples carry a quoted
        command (:func:`learnerd.ml.choice.choose_command`): ``choice_margin`` when ``choose_quoted`` on the
        transformers backend, else None (off; llama.cpp's backend scores no candidates)."""
        return self.choice_margin if self.choose_quoted and self.backend == "transformers" else None

    @field_validator("base_models")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if not all(value):
            raise ValueError("serve.base_models: names must not be empty")
        return value
