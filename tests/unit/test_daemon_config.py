"""The TOML config: defaults, path resolution, refusals, and per-controller defaults kept."""

import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from learnerd.daemon.config import Config, load_config, reference
from learnerd.daemon.controllers import CONTROLLERS
from learnerd.reconcilers.settings import ControllerConfig
from learnerd.sections import ConfigError
from tests.conftest import REPO_ROOT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "learnerd.toml"
    path.write_text(text)
    return path


def test_defaults_need_no_file():
    cfg = load_config(None)
    assert cfg.path is None and cfg.embeddings.backend == "minilm" and cfg.workqueue.qps == 10.0
    assert cfg.controller("training").timeout_s == 6 * 3600.0


def test_relative_paths_resolve_against_the_files_directory(tmp_path):
    cfg = load_config(write(tmp_path, 'state_dir = "state"\nlog_dirs = ["logs", "/abs/logs"]\n'))
    assert cfg.state_dir == tmp_path / "state"
    assert cfg.log_dirs == [tmp_path / "logs", Path("/abs/logs")]
    assert cfg.layout.db_path == tmp_path / "state" / "learnerd.db"


def test_a_controller_section_keeps_the_defaults_it_does_not_mention(tmp_path):
    cfg = load_config(write(tmp_path, "[controllers.training]\nworkers = 2\n[controllers.probes]\nworkers = 3\n"))
    assert cfg.controller("training").workers == 2
    assert cfg.controller("training").timeout_s == 6 * 3600.0, "not reset to the generic 60 s"
    assert cfg.controller("probes").workers == 3 and cfg.controller("probes").timeout_s == 60.0


def test_a_controller_table_must_name_a_controller(tmp_path):
    names = "examples, embeddings, foyle_export, probes, evaluation, vllm_export, gguf_export, training"
    with pytest.raises(ConfigError, match=rf"\[controllers.custom\].*{names}"):
        load_config(write(tmp_path, "[controllers.custom]\nworkers = 3\n"))


@pytest.mark.parametrize("spec", CONTROLLERS, ids=lambda spec: spec.name)
def test_every_controller_spec_is_configurable_and_starts_from_its_defaults(tmp_path, spec):
    cfg = load_config(write(tmp_path, f"[controllers.{spec.name}]\nworkers = 3\n"))
    expected = ControllerConfig(**{**spec.defaults, "workers": 3})
    assert cfg.controller(spec.name) == expected
    assert Config().controller(spec.name) == ControllerConfig(**spec.defaults)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stat_dir = 'x'\n", "unknown top-level key"),
        ("[workqueue]\nqsp = 1\n", "unknown key(s) in [workqueue]"),
        ("[workqueue]\nqps = 'fast'\n", "workqueue.qps must be float"),
        ("[controllers.examples]\nworkers = 0\n", "workers >= 1"),
        ("[embeddings]\nbackend = 'openai'\n", "needs embeddings.base_url"),
        ("state_dir = [\n", "not valid TOML"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_config(write(tmp_path, text))


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_evaluation_calibration_and_threads(tmp_path):
    cfg = load_config(write(tmp_path, '[evaluation]\ncalibration = "document"\nnum_threads = 2\n'))
    assert cfg.evaluation.calibration == "document" and cfg.evaluation.num_threads == 2
    assert load_config(None).evaluation.calibration == "sway"  # sway's z-scores by default
    for bad in ('calibration = "mine"', "num_threads = -1"):
        with pytest.raises(ConfigError, match="evaluation"):
            load_config(write(tmp_path, f"[evaluation]\n{bad}\n"))


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every setting of ``model`` as ``"table.key": FieldInfo``, nested sections walked."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(_fields(annotation, f"{prefix}{name}."))
        elif name != "path" and name != "controllers":
            out[f"{prefix}{name}"] = info
    for spec in CONTROLLERS if not prefix else ():
        out.update({f"controllers.{spec.name}.{k}": v for k, v in ControllerConfig.model_fields.items()})
    return out


def _keys(table: dict[str, Any], tables: set[str], prefix: str = "") -> set[str]:
    """The setting names of a TOML document; ``tables``: settings whose value is itself a table."""
    keys: set[str] = set()
    for key, value in table.items():
        if isinstance(value, dict) and f"{prefix}{key}" not in tables:
            keys |= _keys(value, tables, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def test_the_reference_is_generated_from_every_field_and_its_docstring():
    fields = _fields(Config)
    tables = {key for key, info in fields.items() if typing.get_origin(info.annotation) is dict}
    assert _keys(tomllib.loads(reference()), tables) == set(fields), "one line per setting, nothing else"
    undocumented = sorted(key for key, info in fields.items() if not info.description)
    assert undocumented == [], "each setting's docstring is its description in the reference"
    for key, info in fields.items():
        assert " ".join(info.description.split())[:40] in " ".join(reference().split()), key


def test_the_documented_reference_is_the_generated_one():
    documented = (REPO_ROOT / "docs" / "config-reference.toml").read_text()
    assert documented == reference(), (
        "docs/config-reference.toml is stale: python -c 'from learnerd.daemon.config import reference; "
        'print(reference(), end="")\' > docs/config-reference.toml'
    )
