"""learnerd's configuration: one TOML file plus command-line flags, with defaults that need neither.

This module only composes: every section is declared by the subsystem it configures (``analyzer/settings.py``,
``store/``, ``ml/``, ``fleet/``, ``eval/``, ``steering/``, ``reconcilers/``, ``api/``), on the ground floor's
:class:`~learnerd.sections.Section`. Here they become the file's layout (:class:`Config`), the file is read
(TOML), errors become one line naming the file, the key and the range (:class:`ConfigError`), and the
commented reference of every key (``learnerd init``'s file, ``docs/config-reference.toml``) is generated
from the fields' own docstrings (:func:`reference`). Every key is optional; unknown keys are refused so a typo
never goes unnoticed. The ``[controllers.NAME]`` tables are the reconcilers' specs' names
(:data:`learnerd.daemon.controllers.CONTROLLERS`), each starting from its spec's defaults.

Relative paths in the file are resolved against the file's own directory; ``~`` and ``$VARS`` are expanded.

Where the file is found (:func:`find_config`): ``--config``, else ``$LEARNERD_CONFIG``, else
``$XDG_CONFIG_HOME/learnerd/config.toml`` (``~/.config`` when unset), else ``/etc/learnerd/config.toml``,
else the built-in defaults.
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.api.settings import AdminConfig, RpcConfig, ServeConfig
from learnerd.eval.settings import EvaluationSettings
from learnerd.fleet.settings import FleetConfig
from learnerd.ml.settings import EmbeddingsConfig
from learnerd.privacy.settings import PrivacyConfig
from learnerd.reconcilers.settings import (
    ControllerConfig,
    ExamplesConfig,
    ExportConfig,
    ProbesConfig,
    WorkqueueConfig,
)
from learnerd.sections import CONFIG_ENV, ConfigError, Section, default_config_dir, resolve_path
from learnerd.steering.settings import SteeringConfig
from learnerd.store.settings import StoreConfig, SuggestionsConfig
from learnerd.training.settings import TrainingSettings

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from learnerd.store.layout import StateLayout

STORE_URL_ENV = "LEARNERD_STORE_URL"
"""The environment variable naming the store (``--store-url`` wins, and it wins over ``[store] url``)."""


class Environment(BaseSettings):
    """What learnerd reads from the environment (pydantic-settings): the config file's name, the XDG
    config and state directories and the store's URL (the tokens: :mod:`learnerd.api.tokens`). Read when asked,
    never cached."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=True)

    learnerd_config: str = Field("", validation_alias=CONFIG_ENV)
    xdg_config_home: str = Field("", validation_alias="XDG_CONFIG_HOME")
    xdg_state_home: str = Field("", validation_alias="XDG_STATE_HOME")
    store_url: str = Field("", validation_alias=STORE_URL_ENV)


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/learnerd``, or ``~/.local/state/learnerd`` when XDG_STATE_HOME is unset."""
    base = Environment().xdg_state_home or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "learnerd"


class ShutdownConfig(Section):
    """SIGTERM and `ctl drain`."""

    drain_timeout_s: float = Field(30.0, gt=0)
    """finish in-flight work for at most this long (seconds); then it is cancelled"""


class LoggingConfig(Section):
    """The daemon's log; a reload applies a set level."""

    level: Literal["", "debug", "info", "warning", "error", "critical"] = ""
    """debug, info, warning, error, critical; "" = the --log-level flag (else info)"""
    format: Literal["auto", "json", "console"] = "auto"
    """auto (JSON lines unless stderr is a terminal), json or console"""


def controller_defaults() -> dict[str, dict[str, Any]]:
    """Each controller's name (its spec's one spelling) and the defaults its ``[controllers.NAME]`` keys
    start from, in pipeline order (:data:`learnerd.daemon.controllers.CONTROLLERS`)."""
    from learnerd.daemon.controllers import CONTROLLERS

    return {spec.name: dict(spec.defaults) for spec in CONTROLLERS}


def _default_controllers() -> dict[str, ControllerConfig]:
    return {name: ControllerConfig(**values) for name, values in controller_defaults().items()}


class Config(Section):
    """The whole configuration. ``path`` is the file it came from, or None for pure defaults."""

    state_dir: Path = Field(default_factory=default_state_dir, examples=["~/.local/state/learnerd"])
    """SQLite database, adapters, journals, admin socket"""
    log_dirs: list[Path] = Field(default_factory=list, examples=[["~/assistant-logs"]])
    """directories whose log files the analyzer tails"""
    docs_dirs: list[Path] = Field(default_factory=list, examples=[["~/dlm-docs"]])
    """directories of .dlm documents"""
    analyzer: AnalyzerConfig = Field(default_factory=AnalyzerConfig)
    examples: ExamplesConfig = Field(default_factory=ExamplesConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
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
    suggestions: SuggestionsConfig = Field(default_factory=SuggestionsConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    path: Path | None = None
    """the file this configuration came from (None: the built-in defaults); not a key of the file"""

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
            data["state_dir"] = resolve_path(data["state_dir"], base, follow_symlinks=False)
        for key in ("log_dirs", "docs_dirs"):
            if isinstance(data.get(key), list):
                data[key] = [resolve_path(v, base) if isinstance(v, str) else v for v in data[key]]
        if isinstance(data.get("controllers"), dict):
            defaults = controller_defaults()
            unknown = sorted(set(data["controllers"]) - defaults.keys())
            if unknown:
                raise ValueError(
                    f"unknown controller(s) [controllers.{'], [controllers.'.join(unknown)}]: "
                    f"the controllers are {', '.join(defaults)}"
                )
            controllers = {name: dict(values) for name, values in defaults.items()}
            for name, section in data["controllers"].items():
                controllers[name] = {**controllers[name], **section} if isinstance(section, dict) else section
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


# ---------------------------------------------------------------------------------------- the reference

_COMMENT_COLUMN = 29
_COMMENT_WIDTH = 118


def _toml_value(value: Any) -> str:
    """A default as a TOML literal: bools, numbers, strings, lists and tables of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}" if value else "{}"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def _commented(text: str, comment: str | None) -> list[str]:
    """``text`` with ``comment`` beside it, aligned at the comment column and wrapped."""
    if not comment:
        return [text]
    words = " ".join(comment.split())
    if len(text) + 1 > _COMMENT_COLUMN + 20:  # a long value: its comment goes above it
        return [f"# {line}" for line in textwrap.wrap(words, _COMMENT_WIDTH - 2)] + [text]
    pad = max(_COMMENT_COLUMN, len(text) + 1)
    lines = textwrap.wrap(words, max(40, _COMMENT_WIDTH - pad - 2))
    out = [f"{text.ljust(pad)}# {lines[0]}"]
    out += [f"{'':{pad}}# {line}" for line in lines[1:]]
    return out


def _heading(model: type[BaseModel]) -> str | None:
    doc = (model.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else None


def _table(name: str, model: type[BaseModel], values: BaseModel, heading: str | None = None) -> list[str]:
    """``[name]`` and one ``key = default  # description`` line per scalar field of ``model``; nested
    sections follow as ``[name.sub]`` (a table of nested sections only is not written itself)."""
    lines = ["", *_commented(f"[{name}]", heading)]
    nested: list[tuple[str, type[BaseModel], BaseModel]] = []
    for key, info in model.model_fields.items():
        value = getattr(values, key)
        if isinstance(value, BaseModel):
            nested.append((f"{name}.{key}", type(value), value))
            continue
        lines += _commented(f"{key} = {_toml_value(value)}", info.description)
    if len(lines) == 2 and nested:
        lines = []
    for sub, sub_model, sub_values in nested:
        lines += _table(sub, sub_model, sub_values, _heading(sub_model))
    return lines


def reference() -> str:
    """Every key of the file with its default value and description, generated from the sections' fields
    and their docstrings (valid TOML; the top-level paths show their ``examples`` rather than defaults).
    ``learnerd init`` writes it commented out; ``docs/config-reference.toml`` is a copy a test keeps equal."""
    defaults = Config()
    lines: list[str] = []
    for key, info in Config.model_fields.items():
        if key == "path":
            continue
        value = getattr(defaults, key)
        if isinstance(value, BaseModel):
            lines += _table(key, type(value), value, _heading(type(value)))
        elif key == "controllers":
            for i, (name, controller) in enumerate(value.items()):
                heading = _heading(ControllerConfig)
                lines += _table(f"controllers.{name}", ControllerConfig, controller, heading if i == 0 else None)
        else:
            shown = info.examples[0] if info.examples else value
            lines += _commented(f"{key} = {_toml_value(shown)}", info.description)
    return "\n".join(lines) + "\n"


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


def _describe(error: ErrorDetails, root: str) -> str:
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
    return [default_config_dir(env.xdg_config_home) / "config.toml", SYSTEM_CONFIG]


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
