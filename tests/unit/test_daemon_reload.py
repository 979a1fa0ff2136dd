"""What a reload finds different between two configs, and which of it applies live."""

from __future__ import annotations

from pathlib import Path

from learnerd.daemon.config import config_from_dict
from learnerd.daemon.reload import diff_configs, is_live_setting


def test_diff_names_every_changed_setting_by_its_dotted_key(tmp_path: Path) -> None:
    old = config_from_dict({"log_dirs": ["logs"]}, base=tmp_path, path=tmp_path / "a.toml")
    new = config_from_dict(
        {
            "log_dirs": ["logs", "more"],
            "workqueue": {"qps": 2.0},
            "controllers": {"examples": {"timeout_s": 9.0}, "probes": {"workers": 1}},
            "probes": {"by_language": {"python": "py.dlm"}},
        },
        base=tmp_path,
        path=tmp_path / "b.toml",
    )
    changed = diff_configs(old, new)
    assert changed == {
        "controllers.examples.timeout_s": (60.0, 9.0),
        "controllers.probes.workers": (2, 1),
        "log_dirs": ([str(tmp_path / "logs")], [str(tmp_path / "logs"), str(tmp_path / "more")]),
        "probes.by_language": ({}, {"python": "py.dlm"}),
        "workqueue.qps": (10.0, 2.0),
    }, "the file's own path is not a setting"
    assert diff_configs(old, old) == {}


def test_live_settings() -> None:
    live = [
        "logging.level",
        "workqueue.burst",
        "shutdown.drain_timeout_s",
        "controllers.examples.timeout_s",
        "controllers.training.max_retries",
    ]
    restart = ["log_dirs", "state_dir", "analyzer.poll_interval_s", "controllers.examples.workers", "admin.max_k"]
    assert all(is_live_setting(k) for k in live)
    assert not any(is_live_setting(k) for k in restart)
