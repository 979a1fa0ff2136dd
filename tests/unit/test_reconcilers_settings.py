"""``[export.vllm]``'s servers are root URLs: a path (``/v1``), a query or another scheme is refused with the
key named; a trailing slash is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.sections import ConfigError


def test_vllm_servers_are_kept_as_root_urls(tmp_path: Path):
    cfg = config_from_dict({"export": {"vllm": {"dir": "loras", "servers": ["http://gpu1:8000/"]}}}, tmp_path)
    assert cfg.export.vllm.servers == ["http://gpu1:8000"] and cfg.export.vllm.dir == str(tmp_path / "loras")


@pytest.mark.parametrize("url", ["http://gpu1:8000/v1", "gpu1:8000", "ftp://gpu1", "http://gpu1:8000?x=1"])
def test_a_vllm_server_that_is_not_a_root_url_is_refused(tmp_path: Path, url: str):
    with pytest.raises(ConfigError, match=r"\[export\.vllm\] servers: .* root URL"):
        config_from_dict({"export": {"vllm": {"servers": [url]}}}, tmp_path)


def test_a_retry_cap_below_the_first_delay_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="retry_max_s"):
        config_from_dict({"export": {"vllm": {"retry_base_s": 10.0, "retry_max_s": 1.0}}}, tmp_path)
