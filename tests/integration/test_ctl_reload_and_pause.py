"""``ctl reload`` reports the log level as it takes effect, and ``ctl pause`` survives a restart (issue 15,
item 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerd.daemon.config import load_config
from learnerd.daemon.logging import current_level, set_log_level
from learnerd.daemon.service import ServiceOptions
from tests.support.daemon import running_service

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("restore_log_level")]

BASE = 'state_dir = "state"\nlog_dirs = ["logs"]\ndocs_dirs = ["docs"]\n[training]\nenabled = false\n'


async def test_an_unset_level_is_not_reported_as_a_change(short_root: Path, minilm):
    path = short_root / "learnerd.toml"
    path.write_text(BASE + '[logging]\nlevel = "warning"\n')
    (short_root / "logs").mkdir()
    cfg = load_config(path)
    set_log_level("warning")
    async with running_service(cfg, minilm, ServiceOptions(reload_config=lambda: load_config(path))) as running:
        path.write_text(BASE + "[workqueue]\nqps = 5.0\n")  # the level is no longer set: "" keeps the current one
        result = running.service.reload()
        assert result["changed"] == {"workqueue.qps": (10.0, 5.0)}, 'no logging.level "warning" → ""'
        assert result["applied"] == ["workqueue.qps"] and current_level() == "warning"

        path.write_text(BASE + '[logging]\nlevel = "error"\n')
        result = running.service.reload()
        assert result["changed"]["logging.level"] == ("warning", "error") and current_level() == "error"


async def test_a_paused_controller_stays_paused_after_a_restart(short_root: Path, minilm):
    path = short_root / "learnerd.toml"
    path.write_text(BASE)
    (short_root / "logs").mkdir()
    cfg = load_config(path)
    async with running_service(cfg, minilm) as running:
        running.service.control.pause("examples")
    assert json.loads(cfg.layout.paused_controllers.read_text()) == ["examples"]

    async with running_service(load_config(path), minilm) as running:
        controllers = running.daemon.controllers
        assert controllers["examples"].paused and not controllers["probes"].paused
        running.service.control.resume("examples")

    async with running_service(load_config(path), minilm) as running:
        assert not any(c.paused for c in running.daemon.controllers.values())
