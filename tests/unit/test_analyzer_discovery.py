"""Which files under a log directory are log files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from learnerd.analyzer.analyzer import rescan_interval
from learnerd.analyzer.discovery import discover, find_by_inode, is_log_name, is_log_path
from learnerd.analyzer.settings import AnalyzerConfig


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("a.jsonl", True),
        ("foyle.logs.2024-04-16T19:06:47.json", True),
        ("server.LOG", True),
        (".hidden.jsonl", False),
        ("a.jsonl~", False),
        ("a.jsonl.tmp", False),
        ("a.log.1", False),
        ("a.log-20240501", False),
        ("notes.md", False),
        ("jsonl", False),
        ("history.db", True),
        ("history.db-wal", False),
        ("history.db-shm", False),
    ],
)
def test_log_names(name, counts):
    assert is_log_name(name) is counts


def test_dot_directories_count_only_below_the_root(tmp_path: Path):
    root = str(tmp_path / ".foyle" / "logs")
    assert is_log_path(os.path.join(root, "sub", "a.json"), [root])
    assert not is_log_path(os.path.join(root, ".git", "a.json"), [root])
    assert not is_log_path(str(tmp_path / "elsewhere.json"), [root])
    assert not is_log_path(root, [root])


def test_discover_walks_recursively_and_skips_what_does_not_count(tmp_path: Path):
    root = tmp_path / "logs"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".cache").mkdir()
    for rel in ["a.jsonl", "sub/b.json", "sub/deeper/c.log", "sub/x.txt", ".cache/d.jsonl", ".e.jsonl", "f.log.1"]:
        (root / rel).write_text("{}\n")
    (root / "link.jsonl").symlink_to(root / "a.jsonl")
    (root / "dir.jsonl").mkdir()
    found = discover([str(root), str(tmp_path / "missing")])
    assert list(found) == [str(root / "a.jsonl"), str(root / "sub" / "b.json"), str(root / "sub" / "deeper" / "c.log")]
    assert found[str(root / "a.jsonl")] == os.stat(root / "a.jsonl").st_ino


def test_find_by_inode_looks_at_any_name_in_one_directory(tmp_path: Path):
    (tmp_path / "a.log.1").write_text("x")
    ino = os.stat(tmp_path / "a.log.1").st_ino
    assert find_by_inode(str(tmp_path), ino) == str(tmp_path / "a.log.1")
    assert find_by_inode(str(tmp_path / "nope"), ino) is None


def test_rescans_without_a_watcher_take_at_most_a_twentieth_of_the_time() -> None:
    cfg = AnalyzerConfig(poll_interval_s=1.0, rescan_interval_s=300.0)
    assert rescan_interval(cfg, watching=True, last_scan_s=2.0) == 300.0
    assert rescan_interval(cfg, watching=False, last_scan_s=0.01) == 1.0, "a cheap rescan: every poll"
    assert rescan_interval(cfg, watching=False, last_scan_s=0.5) == pytest.approx(10.0), "100k files: every 10 s"
