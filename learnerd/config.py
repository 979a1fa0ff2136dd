"""learnerd's configuration: one TOML file plus command-line flags, with defaults that need neither.

The file's layout, every key with its default and meaning, is :data:`REFERENCE` (``learnerd init`` writes
it, commented out, into a new config). Every key is optional; unknown keys are refused so a typo never goes
unnoticed.

Relative paths in the file are resolved against the file's own directory; ``~`` and ``$VARS`` are expanded.
Every section is a pydantic model declared once here: a value of the wrong type, out of its range or not
finite (nan, inf) is refused with a one-line :class:`ConfigError` naming the file, the key and the range.
Controller tables are ``examples``, ``embeddings``, ``probes``, ``evaluation`` and ``training`` only.

Where the file is found (:func:`find_config`): ``--config``, else ``$LEARNERD_CONFIG``, else
``$XDG_CONFIG_HOME/learnerd/config.toml`` (``~/.config`` when unset), else ``/etc/learnerd/config.toml``,
else the built-in defaults.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from learnerd.store.layout import StateLayout

REFERENCE = """\
state_dir = "~/.local/state/learnerd"   # SQLite database, adapters, journals, admin socket
log_dirs = ["~/assistant-logs"]         # directories whose log files the analyzer tails
docs_dirs = ["~/dlm-docs"]              # directories of .dlm documents

[analyzer]
poll_interval_s = 1.0        # log directories appearing; full rescan period when polling only
rescan_interval_s = 300.0    # full rescan period while watchfiles runs (the safety net for missed events)
force_polling = false        # rescans only, no watchfiles (network file systems, containers)
debounce_ms = 50             # watchfiles' debounce: how long a burst of changes is gathered
max_line_bytes = 4194304     # longer lines are counted, logged and skipped unread
batch_max_lines = 1000       # lines per transaction (one transaction = blocks + watermark)
batch_max_bytes = 1048576    # bytes per transaction (a single longer line is its own batch)
max_open_files = 128         # log files held open (to finish rotated or deleted files)

[examples]
learn_only_corrections = false   # foyle's original rule: learn only when executed != generated
max_query_chars = 2000

[embeddings]
backend = "minilm"           # or "openai" (any OpenAI-compatible /v1/embeddings endpoint)
model = "all-MiniLM-L6-v2"
base_url = ""
api_key_env = "OPENAI_API_KEY"
batch_size = 64

[probes]                     # where learned examples become ### Q !probe sections
document = "learned.dlm"     # relative to the first docs_dirs entry (else <state_dir>/docs), or absolute
by_language = {}             # example language -> document, e.g. { python = "python.dlm" }
base_model = "learnerd/tiny-llama"  # base_model of a document learnerd creates: built-in or a local HF model dir
broken_document_retry_s = 60.0   # re-check a document that does not parse this often
rewrite_interval_s = 1.0     # a document is rewritten at most this often: a burst of examples is one write

[workqueue]                  # client-go's DefaultControllerRateLimiter
base_delay_s = 0.005
max_delay_s = 1000.0
qps = 10.0
burst = 100

[controllers.examples]       # also embeddings, probes, training, evaluation
workers = 2
timeout_s = 60.0
max_retries = 15

[shutdown]
drain_timeout_s = 30.0       # SIGTERM / `ctl drain`: finish in-flight work for at most this long

[logging]
level = ""                   # debug, info, warning, error, critical; "" = the --log-level flag (else info)
format = "auto"              # auto (JSON lines unless stderr is a terminal), json or console

[admin]                      # the admin socket is always <state_dir>/learnerd.sock
metrics_addr = ""            # HOST:PORT serving GET /metrics over TCP ("" = off); --metrics-addr
search_addr = ""             # HOST:PORT serving POST /search over TCP behind a bearer token; --listen-search
max_body_bytes = 65536       # request bodies larger than this are refused (413)
max_k = 100                  # the largest k a search may ask for

[training]                   # LoRA training cycles (hyperparameters come from each document)
enabled = true               # false: the daemon never trains (run and run --once: the pipeline only)
replay_ratio = 2.0           # an incremental cycle replays ceil(ratio × new rows) unchanged rows ...
replay_min_rows = 32         # ... but at least this many (when the document has them); dlm's budget
num_threads = 0              # torch threads in the training process; 0 = torch's default
niceness = 10                # added to the training process's nice value: the event loop keeps its CPU
warm_spare = true            # keep one training process started ahead of need (learnerd run)
debounce_s = 2.0             # a changed .dlm document is trained after this long without a change ...
debounce_max_s = 60.0        # ... or at the latest this long after its first unanswered change
rescan_interval_s = 10.0     # full rescan of the documents: the safety net beside file-system events
broken_document_retry_s = 30.0   # a document that does not parse (mid-edit) is checked again this often
device = "auto"              # auto (CUDA in bf16 when torch sees a GPU, else CPU float32), cpu, cuda, cuda:N

[controllers.training]       # one cycle at a time by default; a cycle may run for hours
workers = 1
timeout_s = 21600.0

[rpc]                        # live probe injection (dlm's inject_probe); --listen-rpc HOST:PORT
listen = ""                  # HOST:PORT; empty: no RPC server. The token is $LEARNERD_PROBE_TOKEN
document = ""                # the document injected probes go to; empty: the [probes] document
capacity = 1000              # probes accepted but not yet written into the document; beyond: HTTP 429

[store]                      # where the tables live (docs/fleet.md)
url = ""                     # "" = <state_dir>/learnerd.db (SQLite); a SQLite path; or postgresql://…
adapters_dir = ""            # "" = <state_dir>/adapters; a fleet shares one path (a shared file system)

[fleet]                      # replicas sharing one PostgreSQL database (ignored on SQLite)
host = ""                    # the host watermarks are keyed by; "" = this machine's host name
lease_ttl_s = 15.0           # a replica not renewed for this long is dead: its keys are taken over
heartbeat_s = 3.0            # how often a replica renews its lease (must be < lease_ttl_s / 2)
audit = false                # record every reconcile (queue, key, replica, start, end) in reconcile_log

[steering]                   # `learnerd evolve`: per-cluster logit deltas (learnerd.steering)
clusters = 10                # K: k-means clusters of the vocabulary, numbered 2..K+1 (0 = EOS, 1 = numbers)
pca_dim = 32                 # embedding dimensions kept by PCA before k-means
minibatch_size = 8           # pool questions answered per iteration
iterations = 20              # iterations of a run (a resumed run continues to this total)
scale = 100.0                # tokens: shortness = 1 / (1 + mean_len / scale)
delta_bound = 10.0           # every delta must lie in [-bound, bound] (logits)
max_new_tokens = 128         # longest answer generated (tokens)
seed = 0                     # k-means, minibatch sampling and the offline reflector
pool = ""                    # JSONL of {question, answer} rows; "" = the document's probes
reflector = "offline"        # or "openai" (any OpenAI-compatible chat-completions endpoint)
reflector_base_url = ""      # "" = the openai client's default (api.openai.com)
reflector_model = "gpt-4o"
reflector_max_attempts = 3   # requests per iteration before an invalid reply is an error
offline_step = 1.0           # the offline reflector's initial step size (logits)
judge = "match"              # or "llm" (an OpenAI-compatible endpoint judges each answer)
judge_base_url = ""
judge_model = "gpt-4o"
numeric_tolerance = 0.01     # relative tolerance of the match judge's number comparison
api_key_env = "OPENAI_API_KEY"   # environment variable holding the reflector's and judge's key

[evaluation]                 # sway-style evaluation of every committed adapter version
auto_harvest = false         # write failing probes back into the document (which retrains it)
harvest_tag = "auto-harvest" # marker source prefix of harvested sections: "<tag>/<probe>"
min_confidence = 0.0         # harvest only failures at least this far from the reference (1 - similarity)
max_failing_cycles = 3       # a probe still failing after this many cycles with its harvested copy is
                             # reported as stuck and never harvested again (until it passes once)
null_runs = 3                # noise adapters the z-scores are calibrated on (0: fixed thresholds)
calibration = "sway"         # "sway": delta_kl's null on sway's sentinel prompts, noise filled in module
                             # order (z-scores compare with sway's); "document": on the document's prompts
num_threads = 0              # torch threads while evaluating; 0 = the cores idle now (at least 1)
max_prompts = 8              # prompts per divergence probe
max_turns = 4                # dialogue length of the multi-turn probe (2..8)
half_life_target = 2.0       # the multi-turn probe passes at a half-life of at least this many turns
device = "auto"              # where the evaluated model runs: auto, cpu, cuda, cuda:N

[serve]                      # OpenAI-compatible serving (learnerd.api.openai_app); --listen-openai HOST:PORT
listen = ""                  # HOST:PORT; empty: off. Bearer token $LEARNERD_OPENAI_TOKEN (required off loopback)
base_models = []             # base models listed besides the documents' bases ([] = the [probes] base)
queue_size = 16              # chat completions queued or generating; beyond: HTTP 429 with Retry-After
max_tokens = 512             # a request's max_tokens is clamped to this many tokens
max_body_bytes = 1048576     # larger request bodies are refused (413)
rag_k = 0                    # retrieved examples before the last user turn (0 = off; per request: learnerd.rag_k)
steering = false             # apply `learnerd evolve`'s deltas_best.json of the document's run, when there is one
num_threads = 0              # torch threads while generating; 0 = the usable cores minus one (at least 1)

[export.foyle]               # foyle's Example protobuf files (<id>.example.binpb), off by default
dir = ""                     # e.g. "~/.foyle/training"; needs foyle's embedding model (backend "openai")
"""
"""Every key of the file with its default value and meaning (valid TOML; ``~`` paths are examples)."""


class ConfigError(ValueError):
    """Raised for an unreadable config file, an unknown key or a value of the wrong type or range."""


RPC_TOKEN_ENV = "LEARNERD_PROBE_TOKEN"
"""The environment variable holding the RPC server's bearer token (dlm's is ``DLM_PROBE_TOKEN``)."""


STORE_URL_ENV = "LEARNERD_STORE_URL"
"""The environment variable naming the store (``--store-url`` wins, and it wins over ``[store] url``)."""

CONFIG_ENV = "LEARNERD_CONFIG"
"""The environment variable naming the config file (``--config`` wins)."""


class Environment(BaseSettings):
    """What learnerd reads from the environment (pydantic-settings): the config file's name, the XDG
    config and state directories, the RPC server's bearer token and the store's URL. Read when asked, never cached."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=True)

    learnerd_config: str = Field("", validation_alias=CONFIG_ENV)
    xdg_config_home: str = Field("", validation_alias="XDG_CONFIG_HOME")
    xdg_state_home: str = Field("", validation_alias="XDG_STATE_HOME")
    probe_token: str = Field("", validation_alias=RPC_TOKEN_ENV)
    store_url: str = Field("", validation_alias=STORE_URL_ENV)


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/learnerd``, or ``~/.local/state/learnerd`` when XDG_STATE_HOME is unset."""
    base = Environment().xdg_state_home or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "learnerd"


class _Section(BaseModel):
    """A config table: unknown keys refused, no type coercion (TOML's int may stand for a float), no nan/inf."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class AnalyzerConfig(_Section):
    """The analyzer's knobs (see :mod:`learnerd.analyzer.analyzer`). Sizes in bytes, times in seconds.

    ``max_line_bytes`` defaults to 4 MiB: five times the longest line foyle's author observed in real
    logs (772,685 characters, a whole markdown document in one trace), small enough that parsing one
    line stays cheap.
    """

    poll_interval_s: float = Field(1.0, gt=0)
    rescan_interval_s: float = Field(300.0, gt=0)
    force_polling: bool = False
    debounce_ms: int = Field(50, ge=1)
    max_line_bytes: int = Field(4 * 1024 * 1024, ge=1)
    batch_max_lines: int = Field(1000, ge=1)
    batch_max_bytes: int = Field(1024 * 1024, ge=1)
    max_open_files: int = Field(128, ge=1)


class ExamplesConfig(_Section):
    learn_only_corrections: bool = False
    max_query_chars: int = Field(2000, ge=1)


class EmbeddingsConfig(_Section):
    backend: Literal["minilm", "openai"] = "minilm"
    model: str = "all-MiniLM-L6-v2"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = Field(64, ge=1, le=4096)

    @model_validator(mode="after")
    def _openai_needs_a_url(self) -> EmbeddingsConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("embeddings.backend = 'openai' needs embeddings.base_url")
        return self


class ProbesConfig(_Section):
    document: str = Field("learned.dlm", min_length=1)
    by_language: dict[str, str] = Field(default_factory=dict)
    base_model: str = Field("learnerd/tiny-llama", min_length=1)
    broken_document_retry_s: float = Field(60.0, gt=0)
    rewrite_interval_s: float = Field(1.0, ge=0)

    @field_validator("by_language")
    @classmethod
    def _no_empty_document(cls, value: dict[str, str]) -> dict[str, str]:
        if not all(value.values()):
            raise ValueError("probes.by_language: document names must not be empty")
        return value


class WorkqueueConfig(_Section):
    """Rate-limiter settings; defaults are client-go's ``DefaultControllerRateLimiter``."""

    base_delay_s: float = Field(0.005, gt=0)
    max_delay_s: float = Field(1000.0, gt=0)
    qps: float = Field(10.0, gt=0)
    burst: int = Field(100, ge=1)

    @model_validator(mode="after")
    def _delays_ordered(self) -> WorkqueueConfig:
        if self.base_delay_s > self.max_delay_s:
            raise ValueError(
                f"workqueue: need base_delay_s <= max_delay_s, not {self.base_delay_s} > {self.max_delay_s}"
            )
        return self


class ControllerConfig(_Section):
    workers: int = Field(2, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(15, ge=0)


CONTROLLER_DEFAULTS: dict[str, dict[str, Any]] = {
    "examples": {"workers": 2},
    "embeddings": {"workers": 1, "timeout_s": 300.0},
    "probes": {},
    "evaluation": {"workers": 1, "timeout_s": 3600.0},
    "training": {"workers": 1, "timeout_s": 6 * 3600.0},
}
"""The controllers a ``[controllers.NAME]`` table may name, and the defaults its keys start from."""


def _default_controllers() -> dict[str, ControllerConfig]:
    return {name: ControllerConfig(**values) for name, values in CONTROLLER_DEFAULTS.items() if values}


class ShutdownConfig(_Section):
    drain_timeout_s: float = Field(30.0, gt=0)


class LoggingConfig(_Section):
    """``level`` "" leaves the level to the ``--log-level`` flag (default info); a reload applies a set level."""

    level: Literal["", "debug", "info", "warning", "error", "critical"] = ""
    format: Literal["auto", "json", "console"] = "auto"


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


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""The grammar of the ``device`` settings: auto, cpu, cuda or cuda:N (``learnerd.ml.device`` resolves them)."""
DEVICE_CHOICES = "auto | cpu | cuda | cuda:N"


def _device_spec(section: str):
    """A field validator: a ``device`` in :data:`DEVICE_PATTERN`'s grammar."""

    def check(cls: type, value: str) -> str:
        if not DEVICE_PATTERN.fullmatch(value):
            raise ConfigError(f"{section}.device {value!r} is not one of {DEVICE_CHOICES}")
        return value

    return classmethod(check)


def _host_port_or_empty(section: str):
    """A field validator: ``""`` or a valid ``HOST:PORT``."""

    def check(cls: type, value: str, info: ValidationInfo) -> str:
        if value:
            parse_host_port(value, f"{section}.{info.field_name}")
        return value

    return classmethod(check)


class AdminConfig(_Section):
    """The optional TCP endpoints beside the admin socket, and limits on what requests may ask."""

    metrics_addr: str = ""
    search_addr: str = ""
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    max_k: int = Field(100, ge=1)

    _addresses = field_validator("metrics_addr", "search_addr")(_host_port_or_empty("admin"))


class TrainingSettings(_Section):
    """Daemon-wide settings of training cycles; per-document hyperparameters live in the ``.dlm`` file.
    Times in seconds."""

    enabled: bool = True
    replay_ratio: float = Field(2.0, ge=0, le=100)
    replay_min_rows: int = Field(32, ge=0)
    num_threads: int = Field(0, ge=0)
    niceness: int = Field(10, ge=0, le=19)
    warm_spare: bool = True
    debounce_s: float = Field(2.0, gt=0)
    debounce_max_s: float = Field(60.0, gt=0)
    rescan_interval_s: float = Field(10.0, gt=0)
    broken_document_retry_s: float = Field(30.0, gt=0)
    device: str = "auto"

    _device = field_validator("device")(_device_spec("training"))

    @model_validator(mode="after")
    def _debounce_ordered(self) -> TrainingSettings:
        if self.debounce_s > self.debounce_max_s:
            raise ValueError(
                f"training: need debounce_s <= debounce_max_s, not {self.debounce_s} > {self.debounce_max_s}"
            )
        return self


class RpcConfig(_Section):
    """The probe-injection RPC server (``learnerd.api.rpc``). ``listen`` is ``HOST:PORT`` (empty: off)."""

    listen: str = ""
    document: str = ""
    capacity: int = Field(1000, ge=1)

    _listen = field_validator("listen")(_host_port_or_empty("rpc"))

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``listen``, or None when the server is off."""
        return parse_host_port(self.listen, "rpc.listen") if self.listen else None


class StoreConfig(_Section):
    """``[store]``: ``url`` is a SQLite path or a ``postgresql://`` URL ("" = ``<state_dir>/learnerd.db``);
    ``adapters_dir`` the adapter store's root ("" = ``<state_dir>/adapters``). Paths are relative to the file."""

    url: str = ""
    adapters_dir: str = ""

    @field_validator("url", "adapters_dir")
    @classmethod
    def _paths_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        if value.startswith("postgres") and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"store.url: a PostgreSQL URL starts with postgresql://, not {value.split(':')[0]}:")
        base = (info.context or {}).get("base")
        if not value or value.startswith(("postgresql://", "postgres://")) or base is None:
            return value
        return str(_resolve_path(value, base))


class FleetConfig(_Section):
    """``[fleet]``: replicas sharing one PostgreSQL database (``learnerd.fleet``); times in seconds."""

    host: str = ""
    lease_ttl_s: float = Field(15.0, gt=0)
    heartbeat_s: float = Field(3.0, gt=0)
    audit: bool = False

    @model_validator(mode="after")
    def _heartbeat_within_the_lease(self) -> FleetConfig:
        if not self.heartbeat_s < self.lease_ttl_s / 2:
            raise ValueError(
                f"fleet: need heartbeat_s < lease_ttl_s / 2, not {self.heartbeat_s} >= {self.lease_ttl_s / 2}"
            )
        return self


class EvolutionSettings(_Section):
    """The evolution loop's knobs (:func:`learnerd.steering.evolve.run_evolution`): lengths in tokens,
    deltas in logits. :class:`SteeringConfig` (``[steering]``) adds the rest of ``learnerd evolve``'s."""

    iterations: int = Field(20, ge=1)
    minibatch_size: int = Field(8, ge=1)
    scale: float = Field(100.0, gt=0)
    delta_bound: float = Field(10.0, gt=0)
    max_new_tokens: int = Field(128, ge=1)
    seed: int = 0


class SteeringConfig(EvolutionSettings):
    """``learnerd evolve``'s settings (see :mod:`learnerd.steering.evolve`); lengths in tokens, deltas in logits."""

    clusters: int = Field(10, ge=1, le=1000)
    pca_dim: int = Field(32, ge=1)
    pool: str = ""
    reflector: Literal["offline", "openai"] = "offline"
    reflector_base_url: str = ""
    reflector_model: str = "gpt-4o"
    reflector_max_attempts: int = Field(3, ge=1)
    offline_step: float = Field(1.0, gt=0)
    judge: Literal["match", "llm"] = "match"
    judge_base_url: str = ""
    judge_model: str = "gpt-4o"
    numeric_tolerance: float = Field(0.01, ge=0, lt=1)
    api_key_env: str = "OPENAI_API_KEY"

    @field_validator("pool")
    @classmethod
    def _pool_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        base = (info.context or {}).get("base")
        return str(_resolve_path(value, base)) if value and base is not None else value


class EvaluationSettings(_Section):
    """The evaluation reconciler's settings (``learnerd.reconcilers.evaluation``, ``learnerd.eval``);
    :class:`learnerd.eval.probe.EvalOptions` adds the probes' own knobs."""

    auto_harvest: bool = False
    harvest_tag: str = Field("auto-harvest", min_length=1)
    min_confidence: float = Field(0.0, ge=0, le=1)
    max_failing_cycles: int = Field(3, ge=1)
    null_runs: int = Field(3, ge=0, le=20)
    calibration: Literal["sway", "document"] = "sway"
    num_threads: int = Field(0, ge=0)
    max_prompts: int = Field(8, ge=1)
    max_turns: int = Field(4, ge=2, le=8)
    half_life_target: float = Field(2.0, gt=0)
    device: str = "auto"

    _device = field_validator("device")(_device_spec("evaluation"))

    @field_validator("harvest_tag")
    @classmethod
    def _tag_is_a_path_segment(cls, value: str) -> str:
        if '"' in value or "/" in value:
            raise ValueError(f'evaluation.harvest_tag must be non-empty, without "/" or a double quote, not {value!r}')
        return value


OPENAI_TOKEN_ENV = "LEARNERD_OPENAI_TOKEN"
"""The environment variable holding the OpenAI-compatible endpoint's bearer token."""


class ServeConfig(_Section):
    """OpenAI-compatible serving (``learnerd.api.openai_app``, ``learnerd.ml.serving``); sizes in tokens and bytes."""

    listen: str = ""
    base_models: list[str] = Field(default_factory=list)
    queue_size: int = Field(16, ge=1)
    max_tokens: int = Field(512, ge=1)
    max_body_bytes: int = Field(1024 * 1024, ge=1024)
    rag_k: int = Field(0, ge=0)
    steering: bool = False
    num_threads: int = Field(0, ge=0)

    _listen = field_validator("listen")(_host_port_or_empty("serve"))

    @field_validator("base_models")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if not all(value):
            raise ValueError("serve.base_models: names must not be empty")
        return value


class FoyleExportConfig(_Section):
    """``[export.foyle]``: write every example as foyle's ``Example`` protobuf into ``dir`` ("" = off);
    a relative ``dir`` is resolved against the config file's directory."""

    dir: str = ""

    @field_validator("dir")
    @classmethod
    def _dir_relative_to_the_file(cls, value: str, info: ValidationInfo) -> str:
        base = (info.context or {}).get("base")
        return str(_resolve_path(value, base)) if value and base is not None else value


class ExportConfig(_Section):
    """``[export.*]``: copies of the learned examples in other tools' formats."""

    foyle: FoyleExportConfig = Field(default_factory=FoyleExportConfig)


class Config(_Section):
    """The whole configuration. ``path`` is the file it came from, or None for pure defaults."""

    state_dir: Path = Field(default_factory=default_state_dir)
    log_dirs: list[Path] = Field(default_factory=list)
    docs_dirs: list[Path] = Field(default_factory=list)
    analyzer: AnalyzerConfig = Field(default_factory=AnalyzerConfig)
    examples: ExamplesConfig = Field(default_factory=ExamplesConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    probes: ProbesConfig = Field(default_factory=ProbesConfig)
    workqueue: WorkqueueConfig = Field(default_factory=WorkqueueConfig)
    controllers: dict[str, ControllerConfig] = Field(default_factory=_default_controllers)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    steering: SteeringConfig = Field(default_factory=SteeringConfig)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    rpc: RpcConfig = Field(default_factory=RpcConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    path: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_toml(cls, data: Any, info: ValidationInfo) -> Any:
        """From a file (a ``base`` in the context): resolve paths, start controllers from their defaults."""
        if info.context is None or not isinstance(data, dict):
            return data
        if "path" in data:
            raise ValueError("unknown top-level key(s): path")
        data = dict(data)
        base = info.context["base"]
        if isinstance(data.get("state_dir"), str):
            data["state_dir"] = _resolve_path(data["state_dir"], base)
        for key in ("log_dirs", "docs_dirs"):
            if isinstance(data.get(key), list):
                data[key] = [_resolve_path(v, base) if isinstance(v, str) else v for v in data[key]]
        if isinstance(data.get("controllers"), dict):
            unknown = sorted(set(data["controllers"]) - CONTROLLER_DEFAULTS.keys())
            if unknown:
                raise ValueError(
                    f"unknown controller(s) [controllers.{'], [controllers.'.join(unknown)}]: "
                    f"the controllers are {', '.join(CONTROLLER_DEFAULTS)}"
                )
            controllers = {name: dict(values) for name, values in CONTROLLER_DEFAULTS.items() if values}
            for name, section in data["controllers"].items():
                controllers[name] = {**controllers.get(name, {}), **section} if isinstance(section, dict) else section
            data["controllers"] = controllers
        data["path"] = info.context.get("path")
        return data

    @property
    def layout(self) -> StateLayout:
        """Where every file under ``state_dir`` lives (:class:`learnerd.store.layout.StateLayout`), with
        ``[store]``'s database and adapter store."""
        from learnerd.store.layout import StateLayout

        shared = Path(self.store.adapters_dir) if self.store.adapters_dir else None
        return StateLayout(self.state_dir, tuple(self.docs_dirs), self.store.url, shared)

    def controller(self, name: str) -> ControllerConfig:
        """The settings of controller ``name``; defaults when the file does not mention it."""
        return self.controllers.get(name) or ControllerConfig()


def _resolve_path(raw: str, base: Path) -> Path:
    p = Path(os.path.expandvars(os.path.expanduser(raw)))
    return p if p.is_absolute() else (base / p).resolve()


# ---------------------------------------------------------------------------------------- error messages

_TYPE_NAMES = {
    "int_type": "int",
    "float_type": "float",
    "string_type": "str",
    "bool_type": "bool",
    "dict_type": "a table",
    "list_type": "a list",
    "is_instance_of": "a string",
}


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic ``FieldInfo`` that ``loc`` (an error location in :class:`Config`) names, or None."""
    model: Any = Config
    info = None
    steps = iter(loc)
    for name in steps:
        if model is None or name not in model.model_fields:
            return None
        info = model.model_fields[name]
        annotation = info.annotation
        if get_origin(annotation) is dict:  # [controllers.NAME]: skip NAME
            next(steps, None)
            annotation = get_args(annotation)[1]
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return info


def _range(key: str, info: Any) -> str:
    """``"1 <= clusters <= 1000"`` from the bounds of a field."""
    low = high = ""
    for bound in getattr(info, "metadata", []):
        if isinstance(bound, Ge):
            low = f"{bound.ge} <= "
        elif isinstance(bound, Gt):
            low = f"{bound.gt} < "
        elif isinstance(bound, Le):
            high = f" <= {bound.le}"
        elif isinstance(bound, Lt):
            high = f" < {bound.lt}"
    if low and not high:  # "workers >= 1" reads better than "1 <= workers"
        op, value = low.split()[1], low.split()[0]
        return f"{key} {'>=' if op == '<=' else '>'} {value}"
    return f"{low}{key}{high}"


def _describe(error: dict[str, Any], root: str) -> str:
    """One pydantic error as one clear sentence naming the key (and the allowed range)."""
    loc = tuple(error["loc"])
    kind, value = error["type"], error.get("input")
    dotted = ".".join(str(part) for part in loc)
    key = str(loc[-1]) if loc else ""
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "finite_number":
        return f"{dotted} must be a finite number, not {value!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{dotted} = {value!r} is out of range: need {_range(key, _field_at(loc))}"
    if kind in ("string_too_short", "too_short"):
        return f"{dotted} must not be empty"
    if kind == "literal_error":
        return f"{dotted} must be {error['ctx']['expected']}, not {value!r}"
    if kind == "model_type":
        return f"[{dotted}] must be a table, not {type(value).__name__}"
    if kind in _TYPE_NAMES:
        return f"{dotted} must be {_TYPE_NAMES[kind]}, not {type(value).__name__}"
    return f"{dotted or root}: {error['msg']}"


def _config_error(exc: ValidationError, where: str) -> ConfigError:
    """One :class:`ConfigError` from every error of ``exc``; unknown keys grouped per table."""
    unknown: dict[tuple[Any, ...], list[str]] = {}
    messages: list[str] = []
    for error in exc.errors(include_url=False):
        if error["type"] == "extra_forbidden":
            unknown.setdefault(tuple(error["loc"][:-1]), []).append(str(error["loc"][-1]))
        else:
            messages.append(_describe(error, exc.title))
    for table, keys in unknown.items():
        name = ".".join(str(part) for part in table)
        head = f"unknown key(s) in [{name}]" if table else "unknown top-level key(s)"
        messages.insert(0, f"{head}: {', '.join(sorted(keys))}")
    text = "; ".join(messages)
    return ConfigError(f"{where}: {text}" if where else text)


# ---------------------------------------------------------------------------------------- loading

SYSTEM_CONFIG = Path("/etc/learnerd/config.toml")


def config_candidates(env: Environment | None = None) -> list[Path]:
    """The files :func:`find_config` tries after ``--config`` and ``$LEARNERD_CONFIG``, in order:
    ``$XDG_CONFIG_HOME/learnerd/config.toml`` (``~/.config`` when unset), ``/etc/learnerd/config.toml``."""
    env = env or Environment()
    xdg = Path(env.xdg_config_home or Path("~/.config").expanduser())
    return [xdg / "learnerd" / "config.toml", SYSTEM_CONFIG]


def find_config(explicit: str | os.PathLike[str] | None = None, env: Environment | None = None) -> Path | None:
    """The config file to read: ``explicit`` (``--config``), else ``$LEARNERD_CONFIG``, else the first of
    :func:`config_candidates` that exists; None when there is none (the built-in defaults apply)."""
    env = env or Environment()
    if explicit:
        return Path(explicit)
    if env.learnerd_config:
        return Path(env.learnerd_config)
    return next((p for p in config_candidates(env) if p.exists()), None)


def check_directories(cfg: Config) -> None:
    """Refuse a ``state_dir``, ``log_dirs`` or ``docs_dirs`` entry that exists but is not a directory
    (a missing one is created when needed).

    Raises:
        ConfigError: names the setting and the path.
    """
    named = [("state_dir", cfg.state_dir)]
    named += [(f"log_dirs[{i}]", p) for i, p in enumerate(cfg.log_dirs)]
    named += [(f"docs_dirs[{i}]", p) for i, p in enumerate(cfg.docs_dirs)]
    where = f"{cfg.path}: " if cfg.path else ""
    for key, path in named:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{where}{key} {path} is not a directory")


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read ``path`` (TOML) into a validated :class:`Config`; ``None`` gives the defaults.

    Raises:
        ConfigError: the file is missing, unreadable, not a regular file (a directory, a FIFO: never
            opened, so a FIFO cannot block) or not TOML, or a key is unknown, of the wrong type, out of
            range or not finite. The message names the file.
    """
    if path is None:
        return Config()
    file = Path(path).expanduser().absolute()
    try:
        mode = file.stat().st_mode
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise ConfigError(f"config file {file} is {what}")
        text = file.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {file}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {file} cannot be read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
    return config_from_dict(raw, base=file.parent, path=file)


def config_from_dict(raw: dict[str, Any], base: Path | None, path: Path | None = None) -> Config:
    """Build a validated :class:`Config` from parsed TOML; relative paths resolve against ``base``
    (the current directory when None).

    Raises:
        ConfigError: one line naming ``path`` (when given), each bad key and its allowed range.
    """
    context = {"base": base if base is not None else Path.cwd(), "path": path}
    try:
        return Config.model_validate(raw, context=context)
    except ValidationError as exc:
        raise _config_error(exc, str(path) if path else "") from None
