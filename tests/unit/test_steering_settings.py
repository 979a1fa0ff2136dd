"""The ``[steering]`` section of learnerd's config."""

from __future__ import annotations

import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.sections import ConfigError
from learnerd.steering.settings import SteeringConfig


def test_defaults():
    cfg = config_from_dict({}, base=None)
    assert cfg.steering == SteeringConfig()
    assert (cfg.steering.clusters, cfg.steering.reflector, cfg.steering.judge) == (10, "offline", "match")
    assert cfg.layout.steering_dir == cfg.state_dir / "steering"


def test_values_and_relative_pool(tmp_path):
    cfg = config_from_dict(
        {"steering": {"clusters": 4, "scale": 50, "pool": "fb.jsonl", "reflector": "openai", "reflector_model": "m"}},
        base=tmp_path,
    )
    assert cfg.steering.clusters == 4 and cfg.steering.scale == 50.0 and isinstance(cfg.steering.scale, float)
    assert cfg.steering.pool == str(tmp_path / "fb.jsonl")
    assert (cfg.steering.reflector, cfg.steering.reflector_model) == ("openai", "m")


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"clusters": 0}, "steering.clusters"),
        ({"scale": 0}, "scale"),
        ({"delta_bound": -1.0}, "delta_bound"),
        ({"minibatch_size": 0}, "minibatch_size"),
        ({"reflector": "gpt"}, "steering.reflector"),
        ({"judge": "exact"}, "steering.judge"),
        ({"numeric_tolerance": 1.5}, "numeric_tolerance"),
        ({"iterations": "ten"}, "steering.iterations must be int"),
        ({"k": 10}, r"unknown key\(s\) in \[steering\]: k"),
        ({"server": {"start": "serve {steering}"}}, "server.start needs server.health_url"),
        ({"server": {"start": "s", "health_url": "http://h/", "stop_signal": "TERM"}}, "stop_signal"),
        ({"server": {"ready_timeout_s": 0}}, "ready_timeout_s"),
        ({"cluster_bounds": {"0": [5, 1]}}, r"cluster 0's \[5.0, 1.0\] is not a finite \[low, high\]"),
        ({"cluster_bounds": {"0": [0]}}, "cluster_bounds"),
    ],
)
def test_invalid(section, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"steering": section}, base=tmp_path)


def test_flags_are_validated_like_the_file(tmp_path):
    from learnerd.cmd._common import CommandError
    from learnerd.cmd.evolve import steering_settings
    from learnerd.cmd.main import build_parser

    base = config_from_dict({"steering": {"clusters": 4}}, base=tmp_path).steering
    args = build_parser().parse_args(["evolve", "doc.dlm", "--scale", "50", "--pool", str(tmp_path / "p.jsonl")])
    settings = steering_settings(base, args)
    assert (settings.clusters, settings.scale, settings.pool) == (4, 50.0, str(tmp_path / "p.jsonl"))
    for flags, words in ((["--clusters", "0"], "steering.clusters"), (["--scale", "nan"], "finite")):
        with pytest.raises(CommandError, match=words) as info:
            steering_settings(base, build_parser().parse_args(["evolve", "doc.dlm", *flags]))
        assert info.value.exit_code == 2


def test_the_server_answers_at_its_health_urls_origin_unless_base_url_is_set(tmp_path):
    server = {"start": "vllm serve m", "health_url": "http://127.0.0.1:8000/health"}
    cfg = config_from_dict({"steering": {"server": server}}, base=tmp_path).steering.server
    assert cfg.chat_base_url() == "http://127.0.0.1:8000/v1"
    assert (cfg.stop_signal, cfg.ready_timeout_s, cfg.model) == ("SIGTERM", 300.0, "default")
    other = config_from_dict({"steering": {"server": {**server, "base_url": "http://h:9/api/v1"}}}, base=tmp_path)
    assert other.steering.server.chat_base_url() == "http://h:9/api/v1"
    assert config_from_dict({}, base=None).steering.server.start == ""  # answered in process by default


def test_cluster_bounds_from_the_file_and_the_flags(tmp_path):
    """TOML keys are strings; ``--cluster-bound`` adds to (and overrides) the file's bounds."""
    from learnerd.cmd._common import CommandError
    from learnerd.cmd.evolve import steering_settings
    from learnerd.cmd.main import build_parser

    base = config_from_dict({"steering": {"delta_bound": 3, "cluster_bounds": {"2": [-1, 0]}}}, base=tmp_path).steering
    assert base.interval(2) == (-1.0, 0.0) and base.interval(0) == (-3.0, 3.0)
    args = build_parser().parse_args(["evolve", "doc.dlm", "--cluster-bound", "0=0,8", "--cluster-bound", "2=-2,2"])
    settings = steering_settings(base, args)
    assert settings.cluster_bounds == {0: (0.0, 8.0), 2: (-2.0, 2.0)}
    with pytest.raises(CommandError, match="expected ID=LOW,HIGH"):
        steering_settings(base, build_parser().parse_args(["evolve", "doc.dlm", "--cluster-bound", "0:0:8"]))
