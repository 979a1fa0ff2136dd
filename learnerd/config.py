"""learnerd's configuration: one TOML file plus command-line flags, with defaults that need neither.

Layout of the file (every key optional; unknown keys are refused so a typo never goes unnoticed)::

    state_dir = "~/.local/state/learnerd"   # SQLite database, adapters, journals, admin socket
    log_dirs = ["~/assistant-logs"]         # directories whose log files the analyzer tails
    docs_dirs = ["~/dlm-docs"]              # directories of .dlm documents

    [analyzer]
    poll_interval_s = 1.0        # full rescan period: the safety net beside file-system events
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
    max_prompts = 8              # prompts per divergence probe
    max_turns = 4                # dialogue length of the multi-turn probe (2..8)
    half_life_target = 2.0       # the multi-turn probe passes at a half-life of at least this many turns
    device = "auto"              # where the evaluated model runs: auto, cpu, cuda, cuda:N

Relative paths in the file are resolved against the file's own directory; ``~`` and ``$VARS`` are expanded.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

if TYPE_CHECKING:
    from learnerd.store.layout import StateLayout


class ConfigError(ValueError):
    """Raised for an unreadable config file, an unknown key or a value of the wrong type or range."""


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/learnerd``, or ``~/.local/state/learnerd`` when XDG_STATE_HOME is unset."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "learnerd"


@dataclass
class AnalyzerConfig:
    """The analyzer's knobs (see :mod:`learnerd.analyzer.analyzer`). Sizes in bytes, times in seconds.

    ``max_line_bytes`` defaults to 4 MiB: five times the longest line foyle's author observed in real
    logs (772,685 characters, a whole markdown document in one trace), small enough that parsing one
    line stays cheap.
    """

    poll_interval_s: float = 1.0
    force_polling: bool = False
    debounce_ms: int = 50
    max_line_bytes: int = 4 * 1024 * 1024
    batch_max_lines: int = 1000
    batch_max_bytes: int = 1024 * 1024
    max_open_files: int = 128

    def validate(self) -> None:
        if not self.poll_interval_s > 0:
            raise ConfigError("analyzer.poll_interval_s must be > 0")
        if self.debounce_ms < 1:
            raise ConfigError("analyzer.debounce_ms must be >= 1")
        if self.max_line_bytes < 1 or self.batch_max_lines < 1 or self.batch_max_bytes < 1:
            raise ConfigError("analyzer: max_line_bytes, batch_max_lines and batch_max_bytes must be >= 1")
        if self.max_open_files < 1:
            raise ConfigError("analyzer.max_open_files must be >= 1")


@dataclass
class ExamplesConfig:
    learn_only_corrections: bool = False
    max_query_chars: int = 2000


@dataclass
class EmbeddingsConfig:
    backend: str = "minilm"
    model: str = "all-MiniLM-L6-v2"
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 64

    def validate(self) -> None:
        if self.backend not in ("minilm", "openai"):
            raise ConfigError(f"embeddings.backend must be 'minilm' or 'openai', not {self.backend!r}")
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("embeddings.backend = 'openai' needs embeddings.base_url")
        if not 1 <= self.batch_size <= 4096:
            raise ConfigError(f"embeddings.batch_size must be in 1..4096, not {self.batch_size}")


@dataclass
class ProbesConfig:
    document: str = "learned.dlm"
    by_language: dict[str, str] = field(default_factory=dict)
    base_model: str = "learnerd/tiny-llama"
    broken_document_retry_s: float = 60.0
    rewrite_interval_s: float = 1.0

    def validate(self) -> None:
        if self.rewrite_interval_s < 0:
            raise ConfigError("probes.rewrite_interval_s must be >= 0")
        if not isinstance(self.by_language, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.by_language.items()
        ):
            raise ConfigError('probes.by_language must be a table of language = "document" strings')
        if not all([self.document, *self.by_language.values()]):
            raise ConfigError("probes: document names must not be empty")
        if not self.base_model:
            raise ConfigError("probes.base_model must not be empty")
        if self.broken_document_retry_s <= 0:
            raise ConfigError("probes.broken_document_retry_s must be > 0")


@dataclass
class WorkqueueConfig:
    """Rate-limiter settings; defaults are client-go's ``DefaultControllerRateLimiter``."""

    base_delay_s: float = 0.005
    max_delay_s: float = 1000.0
    qps: float = 10.0
    burst: int = 100

    def validate(self) -> None:
        if not 0 < self.base_delay_s <= self.max_delay_s:
            raise ConfigError("workqueue: need 0 < base_delay_s <= max_delay_s")
        if self.qps <= 0 or self.burst < 1:
            raise ConfigError("workqueue: need qps > 0 and burst >= 1")


@dataclass
class ControllerConfig:
    workers: int = 2
    timeout_s: float = 60.0
    max_retries: int = 15

    def validate(self) -> None:
        if self.workers < 1 or self.timeout_s <= 0 or self.max_retries < 0:
            raise ConfigError("controllers.*: need workers >= 1, timeout_s > 0, max_retries >= 0")


def _default_controllers() -> dict[str, ControllerConfig]:
    return {
        "examples": ControllerConfig(workers=2),
        "embeddings": ControllerConfig(workers=1, timeout_s=300.0),
        "evaluation": ControllerConfig(workers=1, timeout_s=3600.0),
        "training": ControllerConfig(workers=1, timeout_s=6 * 3600.0),
    }


@dataclass
class ShutdownConfig:
    drain_timeout_s: float = 30.0

    def validate(self) -> None:
        if not self.drain_timeout_s > 0:
            raise ConfigError("shutdown.drain_timeout_s must be > 0")


@dataclass
class LoggingConfig:
    """``level`` "" leaves the level to the ``--log-level`` flag (default info); a reload applies a set level."""

    level: str = ""
    format: str = "auto"

    def validate(self) -> None:
        levels = ("debug", "info", "warning", "error", "critical")
        if self.level not in ("", *levels):
            raise ConfigError(f"logging.level must be one of {', '.join(levels)}, not {self.level!r}")
        if self.format not in ("auto", "json", "console"):
            raise ConfigError(f"logging.format must be auto, json or console, not {self.format!r}")


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


@dataclass
class AdminConfig:
    """The optional TCP endpoints beside the admin socket, and limits on what requests may ask."""

    metrics_addr: str = ""
    search_addr: str = ""
    max_body_bytes: int = 64 * 1024
    max_k: int = 100

    def validate(self) -> None:
        for name in ("metrics_addr", "search_addr"):
            if value := getattr(self, name):
                parse_host_port(value, f"admin.{name}")
        if self.max_body_bytes < 1024:
            raise ConfigError("admin.max_body_bytes must be >= 1024")
        if self.max_k < 1:
            raise ConfigError("admin.max_k must be >= 1")


@dataclass
class TrainingSettings:
    """Daemon-wide settings of training cycles; per-document hyperparameters live in the ``.dlm`` file.
    Times in seconds."""

    enabled: bool = True
    replay_ratio: float = 2.0
    replay_min_rows: int = 32
    num_threads: int = 0
    niceness: int = 10
    warm_spare: bool = True
    debounce_s: float = 2.0
    debounce_max_s: float = 60.0
    rescan_interval_s: float = 10.0
    broken_document_retry_s: float = 30.0
    device: str = "auto"

    def validate(self) -> None:
        _check_device("training", self.device)
        if not 0 <= self.replay_ratio <= 100 or self.replay_min_rows < 0:
            raise ConfigError("training: need 0 <= replay_ratio <= 100 and replay_min_rows >= 0")
        if self.num_threads < 0:
            raise ConfigError("training.num_threads must be >= 0 (0: torch's default)")
        if not 0 <= self.niceness <= 19:
            raise ConfigError("training.niceness must be in 0..19")
        if not 0 < self.debounce_s <= self.debounce_max_s:
            raise ConfigError("training: need 0 < debounce_s <= debounce_max_s")
        if self.rescan_interval_s <= 0 or self.broken_document_retry_s <= 0:
            raise ConfigError("training: rescan_interval_s and broken_document_retry_s must be > 0")


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
"""The grammar of the ``device`` settings: auto, cpu, cuda or cuda:N (``learnerd.ml.device`` resolves them)."""
DEVICE_CHOICES = "auto | cpu | cuda | cuda:N"


def _check_device(section: str, value: str) -> None:
    if not isinstance(value, str) or not DEVICE_PATTERN.fullmatch(value):
        raise ConfigError(f"{section}.device {value!r} is not one of {DEVICE_CHOICES}")


RPC_TOKEN_ENV = "LEARNERD_PROBE_TOKEN"
"""The environment variable holding the RPC server's bearer token (dlm's is ``DLM_PROBE_TOKEN``)."""


@dataclass
class RpcConfig:
    """The probe-injection RPC server (``learnerd.api.rpc``). ``listen`` is ``HOST:PORT`` (empty: off)."""

    listen: str = ""
    document: str = ""
    capacity: int = 1000

    def validate(self) -> None:
        if self.listen:
            parse_host_port(self.listen, "rpc.listen")
        if self.capacity < 1:
            raise ConfigError("rpc.capacity must be >= 1")

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``listen``, or None when the server is off."""
        return parse_host_port(self.listen, "rpc.listen") if self.listen else None


@dataclass
class SteeringConfig:
    """``learnerd evolve``'s settings (see :mod:`learnerd.steering.evolve`); lengths in tokens, deltas in logits."""

    clusters: int = 10
    pca_dim: int = 32
    minibatch_size: int = 8
    iterations: int = 20
    scale: float = 100.0
    delta_bound: float = 10.0
    max_new_tokens: int = 128
    seed: int = 0
    pool: str = ""
    reflector: str = "offline"
    reflector_base_url: str = ""
    reflector_model: str = "gpt-4o"
    reflector_max_attempts: int = 3
    offline_step: float = 1.0
    judge: str = "match"
    judge_base_url: str = ""
    judge_model: str = "gpt-4o"
    numeric_tolerance: float = 0.01
    api_key_env: str = "OPENAI_API_KEY"

    def validate(self) -> None:
        if not 1 <= self.clusters <= 1000:
            raise ConfigError(f"steering.clusters must be in 1..1000, not {self.clusters}")
        if self.pca_dim < 1 or self.minibatch_size < 1 or self.iterations < 1 or self.max_new_tokens < 1:
            raise ConfigError("steering: pca_dim, minibatch_size, iterations and max_new_tokens must be >= 1")
        if not (self.scale > 0 and self.delta_bound > 0 and self.offline_step > 0):
            raise ConfigError("steering: scale, delta_bound and offline_step must be > 0")
        if self.reflector_max_attempts < 1:
            raise ConfigError("steering.reflector_max_attempts must be >= 1")
        if self.reflector not in ("offline", "openai"):
            raise ConfigError(f"steering.reflector must be 'offline' or 'openai', not {self.reflector!r}")
        if self.judge not in ("match", "llm"):
            raise ConfigError(f"steering.judge must be 'match' or 'llm', not {self.judge!r}")
        if not 0 <= self.numeric_tolerance < 1:
            raise ConfigError("steering.numeric_tolerance must be in [0, 1)")


@dataclass
class EvaluationSettings:
    """The evaluation reconciler's settings (``learnerd.reconcilers.evaluation``, ``learnerd.eval``)."""

    auto_harvest: bool = False
    harvest_tag: str = "auto-harvest"
    min_confidence: float = 0.0
    max_failing_cycles: int = 3
    null_runs: int = 3
    max_prompts: int = 8
    max_turns: int = 4
    half_life_target: float = 2.0
    device: str = "auto"

    def validate(self) -> None:
        _check_device("evaluation", self.device)
        if not self.harvest_tag or '"' in self.harvest_tag or "/" in self.harvest_tag:
            raise ConfigError('evaluation.harvest_tag must be non-empty, without "/" or a double quote')
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ConfigError("evaluation.min_confidence must be in [0, 1]")
        if self.max_failing_cycles < 1 or not 0 <= self.null_runs <= 20 or self.max_prompts < 1:
            raise ConfigError("evaluation: need max_failing_cycles >= 1, null_runs in 0..20, max_prompts >= 1")
        if not 2 <= self.max_turns <= 8 or self.half_life_target <= 0:
            raise ConfigError("evaluation: need max_turns in 2..8 and half_life_target > 0")


@dataclass
class Config:
    """The whole configuration. ``path`` is the file it came from, or None for pure defaults."""

    state_dir: Path = field(default_factory=default_state_dir)
    log_dirs: list[Path] = field(default_factory=list)
    docs_dirs: list[Path] = field(default_factory=list)
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    examples: ExamplesConfig = field(default_factory=ExamplesConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    workqueue: WorkqueueConfig = field(default_factory=WorkqueueConfig)
    controllers: dict[str, ControllerConfig] = field(default_factory=_default_controllers)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    steering: SteeringConfig = field(default_factory=SteeringConfig)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    rpc: RpcConfig = field(default_factory=RpcConfig)
    path: Path | None = None

    @property
    def layout(self) -> StateLayout:
        """Where every file under ``state_dir`` lives (:class:`learnerd.store.layout.StateLayout`)."""
        from learnerd.store.layout import StateLayout

        return StateLayout(self.state_dir, tuple(self.docs_dirs))

    @property
    def db_path(self) -> Path:
        return self.state_dir / "learnerd.db"

    @property
    def adapters_dir(self) -> Path:
        """Root of the versioned adapter store (``learnerd.store.adapters``)."""
        return self.state_dir / "adapters"

    @property
    def models_dir(self) -> Path:
        """Where built-in base models are built and cached (``learnerd.ml.tiny_model``)."""
        return self.state_dir / "models"

    @property
    def socket_path(self) -> Path:
        """The admin socket of the daemon running on this state directory."""
        return self.state_dir / "learnerd.sock"

    @property
    def steering_dir(self) -> Path:
        """Vocabulary-cluster caches and ``learnerd evolve`` run directories (``learnerd.steering``)."""
        return self.state_dir / "steering"

    def controller(self, name: str) -> ControllerConfig:
        """The settings of controller ``name``; defaults when the file does not mention it."""
        return self.controllers.get(name) or ControllerConfig()

    def validate(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if hasattr(value, "validate"):
                value.validate()
        for c in self.controllers.values():
            c.validate()


def _resolve_path(raw: str, base: Path) -> Path:
    p = Path(os.path.expandvars(os.path.expanduser(raw)))
    return p if p.is_absolute() else (base / p).resolve()


def _build_section(cls: type, raw: Any, where: str, base: Any = None) -> Any:
    """``cls`` from the TOML table ``raw``; keys it leaves out keep the values of ``base`` (else the defaults)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] must be a table")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{where}]: {', '.join(unknown)}")
    values = {}
    for key, value in raw.items():
        want = hints[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if want in (int, float, str, bool) and (
            not isinstance(value, want) or (want is int and isinstance(value, bool))
        ):
            raise ConfigError(f"{where}.{key} must be {want.__name__}, not {type(value).__name__}")
        values[key] = value
    return dataclasses.replace(base, **values) if base is not None else cls(**values)


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read ``path`` (TOML) into a validated :class:`Config`; ``None`` gives the defaults.

    Raises:
        ConfigError: the file is missing or not TOML, or a key is unknown or of the wrong type.
    """
    if path is None:
        cfg = Config()
        cfg.validate()
        return cfg
    file = Path(path).expanduser().resolve()
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {file}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
    return config_from_dict(raw, base=file.parent, path=file)


def config_from_dict(raw: dict[str, Any], base: Path, path: Path | None = None) -> Config:
    """Build a validated :class:`Config` from parsed TOML; relative paths resolve against ``base``."""
    cfg = Config(path=path)
    hints = get_type_hints(Config)
    top = {f.name for f in dataclasses.fields(Config)} - {"path"}
    unknown = sorted(set(raw) - top)
    if unknown:
        raise ConfigError(f"unknown top-level key(s): {', '.join(unknown)}")
    for key, value in raw.items():
        if key == "state_dir":
            if not isinstance(value, str):
                raise ConfigError("state_dir must be a string")
            cfg.state_dir = _resolve_path(value, base)
        elif key in ("log_dirs", "docs_dirs"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key} must be a list of strings")
            setattr(cfg, key, [_resolve_path(v, base) for v in value])
        elif key == "controllers":
            if not isinstance(value, dict):
                raise ConfigError("[controllers] must be a table of tables")
            merged = _default_controllers()
            for name, section in value.items():
                merged[name] = _build_section(ControllerConfig, section, f"controllers.{name}", merged.get(name))
            cfg.controllers = merged
        else:
            setattr(cfg, key, _build_section(hints[key], value, key))
    if cfg.steering.pool:
        cfg.steering.pool = str(_resolve_path(cfg.steering.pool, base))
    cfg.validate()
    return cfg
